"""The instance process: a backend, its HTTP control API and its transfer endpoint.

The backend (`serve.backends.interface`) is the `torch` engine on its own thread
(`serve.backends.torch`), the `emulated` one (`serve.backends.emulated`: no compute, no torch
import) or a managed `vllm serve` child (`serve.backends.vllm`), chosen in the deployment file;
this module sees only its torch-free items.

Every instance owns a `Sender` and a `Receiver` writing into an `ArraySink`, built from its
`ShippingPlan` (`transfer.shipping`, resolved by `kv_shipping.shipping_plan`: the one KV shipping
path, which the vLLM connector builds its endpoints from too). The PrfaaS prefill role's sender
goes through the emulated inter-cluster link (kernel-shaped in namespaces, or token bucket
plus delay); its receiver takes cached prefixes moved to it from the PD cluster. PD
instances send over the local network and listen (in the receiver namespace too when
kernel-shaped), so the router can flip them between `pd-prefill` and `pd-decode` at run time
(`POST /role` once the instance is idle: the router drained it first; 409 while a prefill or
decode call is still in progress). The role only decides which calls the instance takes: the
backend does both. A PD instance also owns a `move_sender` paced like the link (token bucket
plus delay) for prefixes it moves to the PrfaaS cluster.

    POST /prefill  run the prefill on the engine thread; send the prompt's ids (once, a
                   PROMPT frame) and stream every layer's slices to the decode instance's
                   receiver as soon as the layer is done; answer after the receiver
                   committed (first token, KV bytes, prefix hit)
    POST /decode   wait for that request's committed KV, import it, stream NDJSON tokens;
                   the prompt is the call's ids or, without them, the ids that came with
                   the KV; a client that goes away cancels the request in the engine
    POST /role     switch a drained PD instance between pd-prefill and pd-decode
    POST /cached         (decode side) the prompt tokens whose attention KV the pool holds
    POST /prefix/send    (holder) export the restorable prefix of a prompt from the pool and
                         ship it to the target's transfer endpoint (cross-cluster move)
    POST /prefix/import  (target) wait for that move's slices, insert them into the pool
    POST /cancel   the request ended without its decode (the router's word): its prefill
                   call here is cancelled (`serve.instance.running_calls`), KV that arrived or
                   arrives for it is released (`serve.instance.kv_claims`), its engine work dropped

Every call must be signed for this instance with the deployment's secret (`serve.auth.control`:
401 otherwise, before the body is read), within the router's limits (`serve.edge.guard`, the
deployment's `instance_edge`); `/prefill` and `/prefix/send` connect only to transfer
endpoints the deployment file names (`transfer_peer`: 400 for any other address).

The HTTP routes themselves are in `serve.instance.app`; this module holds the runtime and the
verbs they call. Lifecycle: `build_runtime` builds the backend (loads the model); `running`
starts it and the transfer endpoint for as long as the app serves
(`instance_app.serve_instance`: until SIGINT/SIGTERM), then closes both. What an instance
holds for requests in progress is in `/state` `resources` (`serve.instance.state`): all 0
when it is idle.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from prfaas.kvcache import KvSlice
from prfaas.serve import protocol as p
from prfaas.serve.backends.interface import (
    BackendInfo,
    Finished,
    InstanceBackend,
    Item,
    PrefillDone,
    Token,
    build_backend,
    prefix_mover,
)
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    InstanceSpec,
    transfer_secret,
)
from prfaas.serve.errors import (
    BadRequestError,
    ConflictError,
    DeploymentError,
    InstanceFailedError,
    NoCapacityError,
    ServeError,
)
from prfaas.serve.instance.kv_claims import ArrivedKv, KvClaims
from prfaas.serve.instance.lease import LeaseBook
from prfaas.serve.instance.running_calls import RunningCalls
from prfaas.serve.instance.stream_text import StreamedText
from prfaas.serve.json_lines import json_line
from prfaas.serve.kv_shipping import link_probe_for, shipping_plan
from prfaas.serve.profile import PrefillTiming
from prfaas.transfer import (
    PeerAddress,
    RequestId,
    Sender,
    SliceKey,
    TransferAborted,
    TransferConfig,
    TransferReceived,
)
from prfaas.transfer.linkemu import RouteProbe
from prfaas.transfer.shipping import KvEndpoints, ShippingPlan

ARRIVAL_TIMEOUT_S = 60.0
HOUSEKEEPING_PERIOD_S = 1.0
SINK_BYTES = 128 * 2**20


PD_ROLES = (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE)


@dataclass(slots=True)
class Activity:
    """Prefill and decode calls in progress (also by the router replica that placed them:
    `by_router`, reported in `/state`), and the seconds with a prefill running."""

    prefills: int = 0
    decodes: int = 0
    by_router: dict[str, p.RouterLoadBody] = field(default_factory=dict)
    _busy_s: float = 0.0
    _busy_since: float | None = None

    def prefill_started(self, router: str = "", work_s: float = 0.0) -> None:
        if self.prefills == 0:
            self._busy_since = time.monotonic()
        self.prefills += 1
        self._tally(router, work_s, 0)

    def prefill_ended(self, router: str = "", work_s: float = 0.0) -> None:
        self.prefills -= 1
        if self.prefills == 0 and self._busy_since is not None:
            self._busy_s += time.monotonic() - self._busy_since
            self._busy_since = None
        self._tally(router, -work_s, 0)

    def decode_started(self, router: str) -> None:
        self.decodes += 1
        self._tally(router, 0.0, 1)

    def decode_ended(self, router: str) -> None:
        self.decodes -= 1
        self._tally(router, 0.0, -1)

    def _tally(self, router: str, work_s: float, decodes: int) -> None:
        """A router's work here; gone once none is left (a small body, bounded by the
        replicas with calls in progress)."""
        load = self.by_router.setdefault(router, p.RouterLoadBody())
        load.prefill_work_s = max(0.0, load.prefill_work_s + work_s)
        load.decodes += decodes
        if load.decodes <= 0 and load.prefill_work_s <= 1e-9:
            del self.by_router[router]

    @property
    def prefill_busy_s(self) -> float:
        running = time.monotonic() - self._busy_since if self._busy_since is not None else 0.0
        return self._busy_s + running

    @property
    def is_idle(self) -> bool:
        return self.prefills == 0 and self.decodes == 0


@dataclass(slots=True)
class InstanceRuntime:
    """Everything one instance process holds, built once at start-up (no globals)."""

    spec: InstanceSpec
    deployment: Deployment
    backend: InstanceBackend
    info: p.InstanceInfo
    shipping: ShippingPlan  # how its KV endpoints are built (`kv_shipping.shipping_plan`)
    transfer_config: TransferConfig
    kv: KvEndpoints | None = None  # None: the backend ships its own KV (`ships_own_kv`)
    claims: KvClaims | None = None  # arrived KV by request id (in `kv.sink`)
    calls: RunningCalls = field(default_factory=RunningCalls)  # prefills, for /cancel
    link_probe: RouteProbe | None = None  # a PrfaaS instance's kernel link (kv_shipping)
    activity: Activity = field(default_factory=Activity)
    lease: LeaseBook = field(default_factory=LeaseBook)  # slow-loop lease grants, fencing
    startup_error: ServeError | None = None  # why the backend did not start (`serve_instance`)


def build_runtime(deployment: Deployment, name: str) -> InstanceRuntime:
    spec = deployment.instance(name)
    # bad TLS files: a one-line error before the model loads
    shipping = shipping_plan(deployment, spec, SINK_BYTES)
    backend = build_backend(deployment, spec)
    facts = backend.info
    info = p.InstanceInfo(
        name=spec.name,
        role=spec.role.value,
        cluster=spec.cluster,
        boot_id=uuid.uuid4().hex,
        model=deployment.model_name,
        max_context_tokens=facts.max_context_tokens,
        transfer_host=spec.host,
        transfer_port=spec.transfer_port,
        kv_bytes_per_token=facts.kv_bytes_per_token,
        kv_capacity_bytes=facts.kv_capacity_bytes,
        max_batch_size=spec.max_batch_size,
        cache=p.CacheIdentityBody.of(facts.cache),
        timing=_timing(facts),
        vocab_size=facts.vocab_size,
        capabilities=facts.capabilities.body(),
        disk_read_bytes_per_s=facts.disk_read_bytes_per_s,
    )
    config = shipping.config(transfer_secret(deployment))
    return InstanceRuntime(spec, deployment, backend, info, shipping, config)


def _timing(facts: BackendInfo) -> p.TimingBody:
    """What the router's scheduler estimates prefill time and KV bytes with (serve.profile)."""
    timing = facts.timing or PrefillTiming.linear(
        facts.kv_bytes_per_token, facts.max_context_tokens
    )
    return p.TimingBody(
        source=timing.source,
        lengths_tokens=list(timing.lengths_tokens),
        prefill_s=list(timing.prefill_s),
        cache_bytes=list(timing.cache_bytes),
        prefill_concurrency=timing.concurrency,
    )


async def _start_transfer(rt: InstanceRuntime) -> None:
    if rt.backend.info.capabilities.ships_own_kv:
        return  # its engine owns the transfer port (serve.backends.vllm), from the same plan
    rt.link_probe = link_probe_for(rt.deployment, rt.spec)
    rt.kv = KvEndpoints.build(rt.shipping, rt.transfer_config.secret, rt.backend.info.peer)
    rt.claims = KvClaims(rt.kv.sink)
    address = rt.shipping.listen_address
    try:
        await rt.kv.listen(rt.shipping)
    except OSError as err:  # the port and the cause, in the CLI's one line
        raise DeploymentError(
            f"{rt.spec.name}: transfer_port: cannot listen on {address.host}:{address.port}: "
            f"{os.strerror(err.errno) if err.errno else err}"
        ) from None


async def _pump_arrivals(rt: InstanceRuntime) -> None:
    """Receiver events -> the claims ledger the /decode handlers wait on."""
    assert rt.kv is not None and rt.claims is not None
    receiver = rt.kv.receiver
    while True:
        await receiver.wait_for_events()
        for event in receiver.take_events():
            if isinstance(event, TransferReceived):
                rt.claims.arrived(event.request_id, event.prompt_token_ids)
            elif isinstance(event, TransferAborted):
                rt.claims.aborted(event.request_id, event.message)


async def _housekeeping(rt: InstanceRuntime) -> None:
    """Every second: KV unclaimed past its lifetime is released (`KvClaims.expire`), and the
    senders' transfer events, which nothing here reads, are dropped so they never pile up."""
    while True:
        await asyncio.sleep(HOUSEKEEPING_PERIOD_S)
        if rt.claims is not None:
            rt.claims.expire()
        for sender in rt.kv.senders if rt.kv is not None else ():
            sender.take_events()


async def run_prefill(rt: InstanceRuntime, body: p.PrefillRequest) -> p.PrefillResult:
    """Prefill here, KV layer by layer to the decode instance; return once it committed."""
    if not rt.spec.role.is_prefill:
        raise BadRequestError(f"instance {rt.spec.name} is not a prefill instance")
    check_vocabulary(rt, body.token_ids)
    peer = transfer_peer(rt, body.decode_transfer_host, body.decode_transfer_port)
    rt.activity.prefill_started(body.router, body.work_s)
    try:
        return await rt.calls.run(body.request_id, _run_prefill(rt, peer, body))
    finally:
        rt.activity.prefill_ended(body.router, body.work_s)


async def _run_prefill(
    rt: InstanceRuntime, peer: PeerAddress, body: p.PrefillRequest
) -> p.PrefillResult:
    """The backend's prefill, the prompt's ids and its slices streamed to `peer` as they come
    (none come from a backend that `ships_own_kv`: its engine sent them, and `PrefillDone`
    says how many bytes). The whole prompt goes, also when the decode instance holds a prefix
    (`from_token`): the decode side takes its prompt from here (`prompt_in_kv_stream`)."""
    started = time.monotonic()
    transfer = None
    if rt.kv is not None:
        transfer = await rt.kv.sender.start_transfer(peer, RequestId(body.request_id))
    kv_bytes = num_slices = 0
    try:  # from here every way out ends the transfer (a refused prefill too)
        if transfer is not None:
            await transfer.send_prompt(body.token_ids)
        items = rt.backend.prefill(asyncio.get_running_loop(), body)
        while True:
            item = await items.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, PrefillDone):
                break
            assert isinstance(item, KvSlice) and transfer is not None
            await transfer.send_slice(_key(item), item.dtype, item.shape, item.data)
            kv_bytes += item.nbytes
            num_slices += 1
        if item.first_token is None:
            raise NoCapacityError(f"instance {rt.spec.name} has no room for this prompt")
        prefill_s = time.monotonic() - started
        if transfer is not None:
            await transfer.finish()
    except BaseException:
        rt.backend.cancel(body.request_id)  # a queued or running prefill: its work is dropped
        if transfer is not None:
            await transfer.abort("prefill failed or was cancelled")
        raise
    return p.PrefillResult(
        request_id=body.request_id,
        first_token=item.first_token,
        hit_tokens=item.hit_tokens,
        kv_bytes=kv_bytes if item.kv_bytes is None else item.kv_bytes,
        num_slices=num_slices,
        prefill_s=prefill_s,
        transfer_s=time.monotonic() - started - prefill_s,
        first_logprob=item.first_logprob,
        first_finish_reason=item.first_finish_reason,
    )


def _key(item: KvSlice) -> SliceKey:
    """Where the slice goes in the receiver's sink: the one `KvSlice` sent as it is."""
    return SliceKey(item.layer_index, item.group_index, item.token_start, item.token_end)


async def _arrived(rt: InstanceRuntime, request_id: str) -> ArrivedKv:
    """The committed slices (and prompt) of transfer `request_id` once they are all here
    (then freed); nothing for a backend that ships its own KV."""
    if rt.claims is None:
        return ArrivedKv([])
    return await rt.claims.claim(request_id, ARRIVAL_TIMEOUT_S)


async def _decode_input(
    rt: InstanceRuntime, call: p.DecodeCall
) -> tuple[p.DecodeRequest, list[KvSlice]]:
    """The backend's decode request and the KV that arrived for it. Its prompt is the call's
    ids or, when the router left them out, the ids that came with the KV (502 when neither
    has them; the claim's own 502 when no KV came)."""
    arrived = await _arrived(rt, call.request_id)
    prompt = call.token_ids if call.token_ids is not None else arrived.prompt_token_ids
    if prompt is None:
        raise InstanceFailedError(
            f"no prompt ids for {call.request_id}: /decode carried none and none came with its KV"
        )
    return call.request(list(prompt)), arrived.slices


def cancel_request(rt: InstanceRuntime, request_id: str) -> p.CancelResult:
    """End whatever this instance holds or does for `request_id` (idempotent): its prefill
    call, its arrived or arriving KV, its work in the engine."""
    cancelled = rt.calls.cancel(request_id)
    if rt.claims is not None:
        rt.claims.drop(request_id)
    rt.backend.cancel(request_id)
    return p.CancelResult(request_id=request_id, cancelled_call=cancelled)


async def stream_decode(rt: InstanceRuntime, call: p.DecodeCall) -> AsyncIterator[bytes]:
    """`DecodeChunk`s as JSON lines (`serve.json_lines`), their text decided before it is
    sent (`serve.instance.stream_text`); cancelled (client gone) -> the engine drops the request.
    A decode whose KV or prompt did not come is one `error` line with the reason."""
    rt.activity.decode_started(call.router)
    try:
        try:
            body, slices = await _decode_input(rt, call)
        except ServeError as err:
            yield json_line(p.DecodeChunk(error=str(err)))
            return
        async for line in _stream_decode(rt, body, slices):
            yield line
    finally:
        rt.activity.decode_ended(call.router)


async def _stream_decode(
    rt: InstanceRuntime, body: p.DecodeRequest, slices: list[KvSlice]
) -> AsyncIterator[bytes]:
    items = rt.backend.decode(asyncio.get_running_loop(), body, slices)
    ids: list[int] = []
    streamed = StreamedText(body.sampling.stop)
    is_done = False
    try:
        while True:
            item: Item = await items.get()
            if isinstance(item, BaseException):
                yield json_line(p.DecodeChunk(error=f"decode failed: {item}"))
                is_done = True
                return
            if isinstance(item, Finished):
                is_done = True
                yield json_line(
                    p.DecodeChunk(
                        text=streamed.rest(item.text),
                        finish_reason=item.finish_reason,
                        num_prompt_tokens=item.num_prompt_tokens,
                        num_completion_tokens=len(item.token_ids),
                        full_text=item.text,
                    )
                )
                return
            if not isinstance(item, Token):
                continue
            ids.append(item.token_id)
            if item.text is not None:
                delta = streamed.append(item.text)
            else:
                delta = streamed.settle(rt.backend.detokenize(ids))
            yield json_line(p.DecodeChunk(token_id=item.token_id, text=delta, logprob=item.logprob))
    finally:
        if not is_done:
            rt.backend.cancel(body.request_id)


def check_vocabulary(rt: InstanceRuntime, token_ids: list[int]) -> None:
    """400 for a token id the model has no embedding for (or a negative one)."""
    vocab = rt.backend.info.vocab_size
    bad = [t for t in token_ids if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        raise BadRequestError(f"token id {bad[0]} is not in the vocabulary ({vocab} ids)")


def transfer_peer(rt: InstanceRuntime, host: str, port: int) -> PeerAddress:
    """The transfer endpoint `host:port` when an instance of this deployment listens there;
    any other address is refused (400): an instance connects to its deployment's peers only."""
    known = {(spec.host, spec.transfer_port) for spec in rt.deployment.instances}
    if (host, port) not in known:
        raise BadRequestError(f"{host}:{port} is not a transfer endpoint of this deployment")
    return PeerAddress(host, port)


async def send_prefix(rt: InstanceRuntime, body: p.PrefixSendRequest) -> p.PrefixSendResult:
    """Export the pool's restorable prefix of the prompt and ship it to the target (the
    PrfaaS sender is on the link already; a PD instance uses its paced `move_sender`; a
    backend that `ships_own_kv` sends it itself). 400 for a target the deployment does not
    name, then 400 `unsupported_by_backend` when the backend does not `moves_prefixes`."""
    peer = transfer_peer(rt, body.target_transfer_host, body.target_transfer_port)
    mover = prefix_mover(rt.backend)
    rt.activity.prefill_started()  # the pool is read: keep a flip waiting
    try:
        shipment = await mover.export_prefix(asyncio.get_running_loop(), body)
        if shipment.slices:
            assert rt.kv is not None
            await _ship_prefix(rt.kv.move_sender, peer, body.move_id, shipment.slices)
    finally:
        rt.activity.prefill_ended()
    return p.PrefixSendResult(
        move_id=body.move_id,
        tokens=shipment.tokens,
        kv_bytes=shipment.kv_bytes + sum(s.nbytes for s in shipment.slices),
        num_slices=len(shipment.slices),
    )


async def _ship_prefix(
    sender: Sender, peer: PeerAddress, move_id: str, slices: Sequence[KvSlice]
) -> None:
    transfer = await sender.start_transfer(peer, RequestId(move_id))
    try:
        for item in slices:
            await transfer.send_slice(_key(item), item.dtype, item.shape, item.data)
        await transfer.finish()
    except BaseException:
        await transfer.abort("prefix move failed or was cancelled")
        raise


async def import_prefix(rt: InstanceRuntime, body: p.PrefixImportRequest) -> p.PrefixImportResult:
    """Wait for move `move_id`, then insert its slices into the pool as cached prefix (a
    backend that `ships_own_kv` loads the move through its engine). 400
    `unsupported_by_backend` when the backend does not `moves_prefixes`."""
    mover = prefix_mover(rt.backend)
    rt.activity.prefill_started()
    try:
        arrived = await _arrived(rt, body.move_id)
        hit = await mover.import_prefix(asyncio.get_running_loop(), body, arrived.slices)
    finally:
        rt.activity.prefill_ended()
    return p.PrefixImportResult(move_id=body.move_id, hit_tokens=hit)


def switch_role(rt: InstanceRuntime, body: p.RoleRequest) -> p.InstanceInfo:
    """A PD instance's new role; only while no prefill or decode call is in progress, and
    only under the newest slow-loop lease epoch it granted (`serve.instance.lease`)."""
    rt.lease.check_epoch(body.epoch)
    try:
        role = InstanceRole(body.role)
    except ValueError:
        raise BadRequestError(f"unknown role {body.role!r}") from None
    if rt.spec.role not in PD_ROLES or role not in PD_ROLES:
        raise BadRequestError("only PD instances switch, between pd-prefill and pd-decode")
    if role is rt.spec.role:
        return rt.info
    if not rt.activity.is_idle:
        a = rt.activity
        raise ConflictError(
            f"instance {rt.spec.name} is busy ({a.prefills} prefills, {a.decodes} decodes)"
        )
    rt.lease.switched(body.epoch, rt.spec.role.value, role.value)
    rt.spec = rt.spec.model_copy(update={"role": role})
    rt.info = rt.info.model_copy(update={"role": role.value})
    return rt.info


@asynccontextmanager
async def running(rt: InstanceRuntime) -> AsyncIterator[None]:
    """The instance's life: the backend and the transfer endpoints started, the arrival pump
    and housekeeping running; on the way out all of them stopped. A start-up that fails is
    kept in `rt.startup_error` (`instance_app.serve_instance` reports it)."""
    try:
        rt.backend.start()
        await _start_transfer(rt)
    except ServeError as err:
        rt.startup_error = err
        raise
    tasks = [asyncio.create_task(_housekeeping(rt))]
    if rt.kv is not None:
        tasks.append(asyncio.create_task(_pump_arrivals(rt)))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        if rt.kv is not None:
            await rt.kv.close()
        rt.backend.stop()
