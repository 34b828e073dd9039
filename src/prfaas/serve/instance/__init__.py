"""The instance process: a thin shell around one backend (`serve.backends`).

`runtime` (the backend, its transfer endpoints, the prefill, decode and prefix-move calls),
`app` (its HTTP control API, every call signed by the router), `state` (`GET /state`: load,
cache events, link telemetry, what requests hold), `kv_claims` (arrived KV claimed, dropped or
expired), `running_calls` (calls `POST /cancel` can end) and `stream_text` (streamed text never
ahead of the final text).
"""
