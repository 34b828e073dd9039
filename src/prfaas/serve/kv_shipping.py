"""Glue between the engine's layer-wise export and the transfer layer, and the deployment's
KV shipping plan.

Prefill side: each `KvSlice` (`prfaas.kvcache`, the one KV record type) is sent as one slice,
`SliceKey(layer, group, start, end)`, as soon as its layer is done. Decode side: the `Receiver`
writes slices into an `ArraySink`; once a request is committed its slices are read back as
`KvSlice`s for the backend's import.

`shipping_plan` resolves, once, what an instance's KV endpoints are built from
(`transfer.shipping`: TLS, the link's shaping, the transfer knobs) for every backend: the
instance shell builds the torch and emulated backends' endpoints from it, the vLLM backend
hands it to its connector. The PrfaaS -> PD link is emulated in one of two ways
(`LinkSpec.shaping`, resolved by the launcher; `transfer.shaping` draws both):

- kernel (`link.netns` set): a PrfaaS instance connects to the PD instances' transfer
  endpoints from the sender namespace; a PD instance also listens in the receiver namespace.
- token-bucket: a PrfaaS instance's sends go through the token bucket at the link's rate and
  a write delay of one RTT.

Either way a PD instance's cache moves, which cross the link to the PrfaaS cluster, leave
through a second sender with the token bucket and the delay (no namespace route that way).
"""

from __future__ import annotations

from dataclasses import replace

from prfaas.kvcache import KvSlice
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec, transfer_tls
from prfaas.transfer import ArraySink, RequestId
from prfaas.transfer.linkemu import RouteProbe
from prfaas.transfer.shipping import Pacing, ReceiverNamespace, SenderNamespace, ShippingPlan


def committed_slices(sink: ArraySink, request_id: str) -> list[KvSlice]:
    """A committed request's slices, in (layer, group, start) order."""
    slices = sink.committed(RequestId(request_id))
    return [
        KvSlice(k.layer, k.group, k.token_start, k.token_end, meta.dtype, tuple(meta.shape), data)
        for k, (meta, data) in sorted(slices.items())
    ]


def link_probe_for(deployment: Deployment, spec: InstanceSpec) -> RouteProbe | None:
    """How a PrfaaS instance tells whether its kernel-shaped link is there now (a route from
    the sender namespace to the receiver address; a killed delay line takes it away): its
    `/state` says `link_up`, and the router routes nothing over a link that is down. None
    without namespaces (a real network, or the token bucket) or for other roles."""
    link = deployment.link
    if spec.role is not InstanceRole.PRFAAS_PREFILL or link.netns is None:
        return None
    return RouteProbe(link.netns.sender_netns, link.netns.receiver_ip)


def shipping_plan(deployment: Deployment, spec: InstanceSpec, sink_bytes: int) -> ShippingPlan:
    """Instance `spec`'s KV shipping plan (module docstring); bad TLS files are a one-line
    `DeploymentError` (`config.transfer_tls`)."""
    link = deployment.link
    paced = Pacing(link.rate_bytes_per_s, link.rtt_ms / 1e3)
    plan = ShippingPlan(
        listen_host=spec.host,
        listen_port=spec.transfer_port,
        payload_checks=deployment.payload_checks,
        sink_bytes=sink_bytes,
        tls=transfer_tls(deployment),
    )
    if spec.role is not InstanceRole.PRFAAS_PREFILL:
        ns = link.netns
        inside = None if ns is None else ReceiverNamespace(ns.receiver_netns, ns.receiver_ip)
        return replace(plan, move=paced, receiver_netns=inside)
    if link.netns is None:
        return replace(plan, send=paced)
    routed = tuple(
        (d.host, d.transfer_port)
        for d in deployment.instances
        if d.role is not InstanceRole.PRFAAS_PREFILL  # a PD-P may be flipped to decode
    )
    netns = SenderNamespace(link.netns.sender_netns, link.netns.receiver_ip, routed)
    return replace(plan, sender_netns=netns)
