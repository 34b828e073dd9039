"""The running system: router, instance processes, launcher (docs/architecture.md).

    client ──HTTP──► router (OpenAI API, GlobalScheduler unchanged, GlobalKVCacheIndex)
                       │ POST /prefill                       │ POST /decode (NDJSON tokens)
                       ▼                                     ▼
              prefill instance ══ KV over TCP (transfer) ══► decode instance
              (prfaas-prefill or pd-prefill)                  (pd-decode)

Modules: `config` (deployment file, the only place env vars are read), `errors` (the one
exception tree of the HTTP boundary), `protocol` (router <-> instance bodies), `instance` (the
instance process) over a `backend`: `worker` (torch, the only serve module that imports it,
through `prfaas.engine`) or `emulated` (a catalog model's timing and KV bytes, no compute),
`kvlink` (sink -> export, user-space link delay), `registry` (the router's live view of the
deployment), `router` and `openai_api` (the HTTP edge), `metrics`, `launcher`, `demo`.
Control plane: `admin_auth` (bearer tokens on the router), `control_auth` (signed router ->
instance calls), `preflight` (every deployment check before anything starts), `supervisor`
(`prfaas up` restarts children with backoff and a budget).
The router imports no torch: it tokenizes through an instance. Guide: docs/serving.md.
"""

from __future__ import annotations
