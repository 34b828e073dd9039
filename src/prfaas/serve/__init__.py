"""The running system: router, instance processes, launcher (docs/architecture.md).

    client ──HTTP──► router (OpenAI API, GlobalScheduler unchanged, GlobalKVCacheIndex)
                       │ POST /prefill                       │ POST /decode (NDJSON tokens)
                       ▼                                     ▼
              prefill instance ══ KV over TCP (transfer) ══► decode instance
              (prfaas-prefill or pd-prefill)                  (pd-decode)

Rooms, one package each (docs/architecture.md, "The serving wing by concern"; their walls are
import-linter contracts): `config` (the deployment file's models, the only place env vars are
read; no behaviour), `auth` (admin bearer tokens, signed control calls), `edge` (the limits on
every port, JSON bodies, the OpenAI bodies), `router` (the router process), `instance` (the
instance shell) over `backends` (`torch`, the only one that imports torch, through
`prfaas.engine`; `emulated`; `vllm`), and `launch` (`prfaas up`: preflight, launcher,
supervisor, demo). Shared by the rooms: `errors` (the one exception tree of the HTTP
boundary), `protocol` (router <-> instance bodies), `json_lines` (the decode stream's framing),
`profile` (the prefill timing instances publish) and `kv_shipping` (the KV shipping plan).
The router imports no torch: it tokenizes through an instance. Guide: docs/serving.md.
"""

from __future__ import annotations
