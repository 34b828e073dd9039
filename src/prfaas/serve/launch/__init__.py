"""Starting a deployment on this host: `preflight` (every check before anything starts),
`launcher` (`prfaas up`: ports chosen and held, the link's shaping resolved, one child per
instance and the router, health awaited, a clean stop), `ports` (the chosen ports, held),
`startup` (one line per instance as it comes up), `supervisor` (children restarted with
backoff and a budget) and `demo` (`prfaas demo`). Children are started as `prfaas instance`
and `prfaas router` processes, never imported.
"""
