"""Kubernetes manifests for a deployment file (`prfaas deploy render`, docs/deploy.md).

One description (`description.py`: the deployment file `prfaas up` runs, plus where each of
its clusters is and what image runs there) becomes one directory of manifests per cluster:

    description.py   the description file (pydantic, strict) and its checks
    layout.py        instances grouped into StatefulSets, their stable names, the deployment
                     file as the pods read it (hosts, ports, secrets moved out)
    workloads.py     the router Deployment, one StatefulSet per (cluster, role), their
                     Services and disruption budgets
    wiring.py        what crosses clusters (exposed instance Services, the other cluster's
                     instances as DNS names), the ConfigMaps and the Secret
    credentials.py   the Secret's values: transfer secret, admin token, API key, TLS files
    render.py        all of it per cluster, and the files written

The pods run the processes `prfaas up` starts (`serve.launch.launcher`), with the same command
lines and environment (`serve.config.deployment.CHILD_ENV`, the transfer secret, the admin
token). This package reads the deployment's models (`serve.config`) and imports no serving
behaviour.
"""
