"""The HTTP edge of every serve process: what a client may send before any route runs.

`guard` (the limits on every port: body size and time, JSON only, the instance's signature
gate), `jsonbody` (raw bytes to JSON that cannot push the parser over) and `openai_api` (the
OpenAI request bodies, validated strictly, and the response bodies). The errors they raise
are `serve.errors`'s, mapped to OpenAI-style JSON there.
"""
