"""Who may call whom: `admin` (bearer tokens on the router's `/admin/*` and `/v1/*`) and
`control` (the router's signed calls to an instance's control API). The transfer secret and
the TLS files are resolved with the deployment (`serve.config`).
"""
