"""The router process: the OpenAI-compatible API over the deployment (no torch here).

`app` (the process and its routes), `completions` and `tokenization` (the OpenAI routes),
`flow` (one request: place, prefill, decode, stream), `admission` and `overload` (429s),
`live_scheduler` (the scheduler assembled from the deployment), `registry` (the live view of
the instances), `breaker`, `attempts` and `release` (failures and cancels), `single_flight`
(shared prefix moves), `rebalance` (the slow loop and role flips), `metrics`, `access_log` and
`dashboard`. It knows an instance only through its HTTP API (`serve.protocol`).
"""
