"""The `vllm` backend: a managed `vllm serve` child with the prfaas connector.

Why a child process and not an in-process `AsyncLLM`: vLLM pins transformers and fastapi
versions our venv cannot share (`make setup-vllm` builds its own, `.venv-vllm`), so the core
venv never imports vLLM (docs/architecture.md walls). The instance shell stays ours (control
API, role, health, `/state`) and drives the child over its OpenAI HTTP API; the KV moves engine
to engine through the connector (`prfaas.integrations.vllm.connector`) over prfaas's transfer
protocol, which the child runs on this instance's `transfer_port`.

    /prefill  -> child /v1/completions, max_tokens 1, kv_transfer_params.prfaas_send =
                 {decode's transfer address, transfer id = request id, from_token}: the
                 connector pushes every layer's new blocks as the layer is computed, then the
                 linear-attention state; the result carries vLLM's cached tokens (prefix hit)
                 and the KV bytes the connector ships
    /decode   -> child /v1/completions (streamed), kv_transfer_params.prfaas_recv: vLLM parks
                 the request until the connector has loaded the KV, then decodes
    /cached   -> the prompt prefix this child's prefix cache holds, from its own KV events
    /state    -> vLLM's KV events (BlockStored/BlockRemoved over ZMQ) as prfaas cache events
                 in prfaas's hash chain (`events`), vLLM's load from its /metrics, and
                 the connector's link telemetry from its status file

The prefill computes every prompt token and samples the first output token, as a single
engine would; the decode child gets the prompt plus that token, holds the KV (and, for hybrid
models, the state) of the prompt from the transfer, and computes only the first token onwards:
the same forwards as one engine, so greedy text equals a single engine's (bit for bit where
vLLM's kernels sum in one order: docs/vllm.md, Status; a hybrid state cannot be rolled back,
so the decode cannot recompute a prompt token). Whether the
first token ended the request (EOS, a stop string) is vLLM's answer at the prefill. The output
text is made here, with vLLM's algorithm (`text`), and stop strings are checked on it:
the decode child sees the first token as prompt, so its own text would not join.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from prfaas.kvcache import CacheIdentity, HashScheme, KvSlice, TierCounters
from prfaas.kvcache.hashing import HASH_ALGORITHM, model_fingerprint
from prfaas.kvcache.ids import InstanceId
from prfaas.kvcache.layout import GroupKind
from prfaas.serve import protocol as p
from prfaas.serve.backends.event_log import EventLog, SeqEvent
from prfaas.serve.backends.interface import (
    BackendInfo,
    Capabilities,
    Finished,
    Item,
    PrefillDone,
    PrefixShipment,
    Token,
)
from prfaas.serve.backends.vllm.api import (
    child_error,
    choices,
    gauges,
    logprobs,
    move_load_request,
    move_send_request,
    vllm_sampling,
)
from prfaas.serve.backends.vllm.arch import (
    engine_refusal,
    layout_mismatch,
    model_from_probe,
    run_probe,
)
from prfaas.serve.backends.vllm.child import (
    ChildPorts,
    serve_command,
    signal_group,
    vllm_environment,
    vllm_python,
)
from prfaas.serve.backends.vllm.child_log import exit_report, log_path, spawn_logged
from prfaas.serve.backends.vllm.events import EventSubscriber, EventTranslator
from prfaas.serve.backends.vllm.text import OutputText, load_tokenizer
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceSpec,
    free_port,
    transfer_secret,
)
from prfaas.serve.errors import (
    BadRequestError,
    InstanceFailedError,
    NoCapacityError,
    ServeError,
)
from prfaas.serve.json_lines import split_lines
from prfaas.serve.launch.launcher import die_with_parent
from prfaas.serve.launch.ports import hold_port
from prfaas.specs.catalog import resolve_model
from prfaas.specs.errors import SpecError, UnsupportedConfigError
from prfaas.transfer import LinkSignals, PeerIdentity, checkpoint_fingerprint, identity_for
from prfaas.transfer.config import SECRET_ENV_VAR

METRICS_INTERVAL_S = 0.5
STOP_GRACE_S = 10.0
LAYOUT_TIMEOUT_S = 30.0  # the connector's status file, once vLLM answers /health


class VllmBackend:
    """The `vllm` `InstanceBackend` (see the module docstring)."""

    def __init__(self, deployment: Deployment, spec: InstanceSpec) -> None:
        self._deployment = deployment
        self._spec = spec
        self._settings = deployment.vllm
        self.model_dir = Path(deployment.model)
        self.python = vllm_python()
        # vLLM's own answer (`arch`): for a model_type prfaas's reader does not know (a
        # full-attention dense model becomes a ModelSpec, anything else is refused), and for
        # the fast tokenizer transformers converts when there is no tokenizer.json
        self.probed: dict[str, Any] | None = None
        self.read_by_vllm = False  # the ModelSpec is the probe's, not prfaas's reader's
        try:
            try:
                self.model = resolve_model(str(self.model_dir))
            except UnsupportedConfigError:
                self.probed = self._probe()
                self.model = model_from_probe(self.probed, self.model_dir.resolve().name)
                self.read_by_vllm = True
            if self.probed is None and not (self.model_dir / "tokenizer.json").exists():
                self.probed = self._probe()
        except SpecError as err:
            raise BadRequestError(f"backend vllm: {err}") from None
        refused = engine_refusal(self.model)
        if refused is not None:
            raise BadRequestError(f"backend vllm: {refused}")
        self.is_hybrid = self.model.state_bytes(1) > 0
        converted = None if self.probed is None else self.probed.get("tokenizer_json")
        if converted is None and self.probed and self.probed.get("tokenizer_error"):
            raise BadRequestError(
                f"backend vllm: {self.model_dir} has no tokenizer.json and transformers "
                f"could not convert its tokenizer: {self.probed['tokenizer_error']}"
            )
        self._tokenizer = load_tokenizer(self.model_dir, converted)
        self._port_hold = hold_port(spec.host)  # held until stop: vllm serve binds minutes later
        self.port = int(self._port_hold.getsockname()[1])
        self.events_port = free_port(spec.host)  # bound here, by the subscriber, at start
        self.url = f"http://{spec.host}:{self.port}"
        scheme = HashScheme(
            deployment.block_tokens, model_fingerprint(self.model), deployment.hash_seed
        )
        kinds = (GroupKind.ATTENTION, GroupKind.STATE) if self.is_hybrid else (GroupKind.ATTENTION,)
        kv_capacity = self._settings.kv_cache_gib * 2**30
        self.info = BackendInfo(
            max_context_tokens=self._settings.max_model_len,
            kv_bytes_per_token=float(self.model.kv_bytes_per_token()),
            kv_capacity_bytes=kv_capacity,
            cache=CacheIdentity(scheme, HASH_ALGORITHM, kinds),
            peer=self._peer_identity(),
            capabilities=Capabilities(
                ships_own_kv=True,  # its connector, on the instance's transfer port
                moves_prefixes=not self.is_hybrid,  # a hybrid's cannot: `_ship_prefix`
                reports_cached_prefix=True,  # from its KV events
                renders_chat=True,  # the child's own chat template
                computes_logprobs=True,  # vLLM's own (raw logits), the first from the prefill
                chat_runs_to_context=True,  # as `vllm serve` alone defaults a chat's max_tokens
                tokenizer_from_model_dir=self._encodes_with_model_dir(),
            ),
        )
        self.num_waiting = 0
        self.num_running = 0
        self.free_pages = kv_capacity // 2**20
        self.held_pages = 0  # vLLM reports its cache usage, not pages held by requests
        self.disk_tier: TierCounters | None = None  # vLLM's offloading is its own
        self._translator = EventTranslator(InstanceId(spec.name), scheme, self.is_hybrid)
        self._events = EventLog()
        self._pending: list[Any] = []
        self._subscriber = EventSubscriber(
            f"tcp://{spec.host}:{self.events_port}", self._pending.append
        )
        self._status_path = Path(f"/tmp/prfaas-vllm-{spec.name}-{os.getpid()}.json")
        self._child: subprocess.Popen[bytes] | None = None
        self._client: httpx.AsyncClient | None = None
        self._sync = httpx.Client(timeout=30.0)
        self._prefills: dict[str, asyncio.Task[None]] = {}
        self._decodes: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def _encodes_with_model_dir(self) -> bool:
        """The child encodes with the directory's tokenizer.json: there is one (not only slow
        files that transformers converts) and no flag of `extra_args` names another."""
        flags = {arg.split("=", 1)[0].replace("_", "-") for arg in self._settings.extra_args}
        has_json = (self.model_dir / "tokenizer.json").is_file()
        return has_json and not flags & {"--tokenizer", "--tokenizer-mode", "--tokenizer-revision"}

    @property
    def _log(self) -> Path:
        """The file vllm serve writes its output to (`child_log`)."""
        return log_path(self._settings.log_dir, self._spec.name)

    def _probe(self) -> dict[str, Any]:
        """vLLM's reading of the model directory with the flags `command` gives the engine
        that decide it (a context longer than the model's is vLLM's refusal here too)."""
        s = self._settings
        flags = ("--max-model-len", str(s.max_model_len), *s.extra_args)
        return run_probe(self.python, self.model_dir, s.dtype, flags, vllm_environment(s))

    def _peer_identity(self) -> PeerIdentity:
        """What the connector inside the child presents at the handshake (its
        `ConnectorSettings.peer_identity`): prfaas's fingerprint of a model its reader
        knows, the config.json digest of one only vLLM read."""
        d = self._deployment
        if not self.read_by_vllm:
            return identity_for(self.model, d.block_tokens, d.hash_seed)
        return PeerIdentity(checkpoint_fingerprint(self.model_dir), d.block_tokens, d.hash_seed)

    # --- the child ---------------------------------------------------------------------

    def command(self) -> list[str]:
        """`vllm serve` for this instance, with the connector and the KV event publisher."""
        ports = ChildPorts(self.port, self.events_port, self._status_path)
        return serve_command(self.python, self.model_dir, self._deployment, self._spec, ports)

    def start(self) -> None:
        """Start the child and wait until it serves (vLLM needs ~30-100 s on 2 cores)."""
        if not self.python.exists():
            raise InstanceFailedError(
                f"no vLLM venv at {self.python.parent.parent}: run `make setup-vllm` "
                "(or set PRFAAS_VLLM_PYTHON)"
            )
        env = vllm_environment(self._settings)
        env[SECRET_ENV_VAR] = transfer_secret(self._deployment).decode()  # never on argv
        self._subscriber.start()
        if not self._settings.log_dir:
            print(f"prfaas: {self._spec.name}: vllm serve writes to {self._log}", file=sys.stderr)
        self._child = spawn_logged(self.command(), self._log, env=env, preexec_fn=die_with_parent)
        deadline = time.monotonic() + self._settings.start_timeout_s
        while time.monotonic() < deadline:
            if self._child.poll() is not None:
                raise InstanceFailedError(
                    exit_report("vllm serve", self._child.returncode, self._log)
                )
            with contextlib.suppress(httpx.HTTPError):
                if self._sync.get(self.url + "/health", timeout=2.0).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            self.stop()
            raise InstanceFailedError(
                f"vllm serve did not answer within {self._settings.start_timeout_s:.0f} s "
                f"(log: {self._log})"
            )
        mismatch = layout_mismatch(self.model, self._cache_layout())
        if mismatch is not None:
            self.stop()
            raise BadRequestError(f"backend vllm: {mismatch}")
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))
        self._tasks = [asyncio.get_running_loop().create_task(self._watch())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._subscriber.stop()
        child = self._child
        if child is not None:
            signal_group(child, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=STOP_GRACE_S)
            signal_group(child, signal.SIGKILL)  # engine-core processes left behind, if any
            child.wait()
        self._port_hold.close()
        self._status_path.unlink(missing_ok=True)

    async def _watch(self) -> None:
        """vLLM's queue and cache use from /metrics; a dead child fails the instance."""
        assert self._client is not None
        while True:
            if self._child is not None and self._child.poll() is not None:
                code = self._child.returncode
                report = exit_report(f"vllm serve of {self._spec.name}", code, self._log)
                print(f"prfaas: {report}", file=sys.stderr)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            with contextlib.suppress(httpx.HTTPError):
                text = (await self._client.get(self.url + "/metrics", timeout=2.0)).text
                metrics = gauges(text)
                self.num_running = int(metrics.get("vllm:num_requests_running", 0))
                self.num_waiting = int(metrics.get("vllm:num_requests_waiting", 0))
                used = metrics.get("vllm:kv_cache_usage_perc", 0.0)
                self.free_pages = int((1.0 - used) * self.info.kv_capacity_bytes / 2**20)
            await asyncio.sleep(METRICS_INTERVAL_S)

    # --- tokens ------------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """vLLM's own tokenization (what `vllm serve` alone would feed the model)."""
        if not text:
            raise BadRequestError("the prompt is empty")
        body = {
            "model": self._deployment.model_name,
            "prompt": text,
            "add_special_tokens": add_special_tokens,
        }
        response = self._sync.post(self.url + "/tokenize", json=body)
        if response.status_code != 200:
            raise BadRequestError(f"vLLM could not tokenize the prompt: {response.text[:200]}")
        return list(response.json()["tokens"])

    def encode_chat(self, chat: p.ChatPrompt) -> list[int]:
        """The child renders the model's chat template, as its chat endpoint would."""
        body = {"model": self._deployment.model_name, **chat.model_dump(exclude_none=True)}
        response = self._sync.post(self.url + "/tokenize", json=body)
        if response.status_code != 200:
            raise child_error(response)  # e.g. a model without a chat template: a 400
        return list(response.json()["tokens"])

    def detokenize(self, token_ids: Sequence[int]) -> str:
        body = {"model": self._deployment.model_name, "tokens": list(token_ids)}
        response = self._sync.post(self.url + "/detokenize", json=body)
        if response.status_code != 200:
            raise InstanceFailedError(f"vLLM could not detokenize: {response.text[:200]}")
        return str(response.json()["prompt"])

    # --- prefill -----------------------------------------------------------------------

    def prefill(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefillRequest
    ) -> asyncio.Queue[Item]:
        """Prefill on the child; its connector ships the KV to the decode instance, so the
        queue gets only the `PrefillDone` (or the error). `cancel` ends the call."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        task = loop.create_task(self._prefill(body, out))
        self._prefills[body.request_id] = task
        task.add_done_callback(lambda _: self._prefills.pop(body.request_id, None))
        return out

    async def _prefill(self, body: p.PrefillRequest, out: asyncio.Queue[Item]) -> None:
        try:
            out.put_nowait(await self._prefill_done(body))
        except Exception as err:
            out.put_nowait(err)

    async def _prefill_done(self, body: p.PrefillRequest) -> PrefillDone:
        """The child's one-token completion (max_tokens 1: ships nothing, no decode loads it)."""
        ships = body.sampling.max_tokens > 1
        request = {
            "model": self._deployment.model_name,
            "prompt": body.token_ids,
            **vllm_sampling(body.sampling, 1, stop=True),
        }
        if ships:
            request["kv_transfer_params"] = {
                "prfaas_send": {
                    "transfer_id": body.request_id,
                    "host": body.decode_transfer_host,
                    "port": body.decode_transfer_port,
                    "from_token": body.from_token,
                }
            }
        answer = await self._complete(request)
        choice = answer["choices"][0]
        params = answer.get("kv_transfer_params") or {}
        if ships and "prfaas_kv_bytes" not in params:
            raise NoCapacityError("vLLM finished the prefill without handing its KV over")
        details = answer["usage"].get("prompt_tokens_details") or {}
        return PrefillDone(
            first_token=choice["token_ids"][0],
            hit_tokens=int(details.get("cached_tokens") or 0),
            first_logprob=logprobs(choice, body.sampling.logprobs, self._tokenizer)[0],
            kv_bytes=int(params.get("prfaas_kv_bytes", 0)),
            first_finish_reason="stop" if choice.get("finish_reason") == "stop" else None,
        )

    # --- cache moves --------------------------------------------------------------------

    def export_prefix(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefixSendRequest
    ) -> asyncio.Task[PrefixShipment]:
        """`_ship_prefix` on `loop` (`PrefixMover`: only when not hybrid, `capabilities`)."""
        return loop.create_task(self._ship_prefix(body))

    async def _ship_prefix(self, body: p.PrefixSendRequest) -> PrefixShipment:
        """The holder's half of a cache move: the prompt prefix this child's prefix cache
        holds (k tokens, whole vLLM blocks, at most `max_tokens`) goes to the target. vLLM
        has no call that exports blocks, so the move is the disaggregated flow itself: the
        first k - 1 tokens run here as a one-token prefill (hits in this cache but for the
        last block) that ships every block, paced as the link; the target loads them and
        computes token k (`import_prefix`). Not for a hybrid model (its `capabilities` say
        so): a moved prefix would end on a block boundary, where vLLM's align mode can neither
        place a loaded state nor keeps one it did not checkpoint (docs/vllm.md)."""
        self._drain()
        # vLLM computes at least a prompt's last token: a hit never spans the whole prompt
        limit = min(body.max_tokens, len(body.token_ids) - 1)
        k = self._translator.held_prefix_tokens(body.token_ids[:limit])
        if self._translator.block_size is not None:
            k -= k % self._translator.block_size
        if k < 2:
            return PrefixShipment(0)
        request = move_send_request(self._deployment.model_name, body, k)
        params = (await self._complete(request)).get("kv_transfer_params") or {}
        if "prfaas_kv_bytes" not in params:
            raise NoCapacityError("vLLM finished the move's prefill without handing its KV over")
        return PrefixShipment(k, kv_bytes=int(params["prfaas_kv_bytes"]))

    def import_prefix(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.PrefixImportRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Task[int]:
        """`_receive_prefix` on `loop`: the connector loads the move (`slices`: none, the
        shell received nothing)."""
        return loop.create_task(self._receive_prefix(body))

    async def _receive_prefix(self, body: p.PrefixImportRequest) -> int:
        """The target's half: a one-token request for the prefix loads its first k - 1
        tokens from the move and computes the last, which leaves all k in this child's
        prefix cache for the prefill that follows. vLLM counts the loaded tokens as cached;
        fewer means the load failed and vLLM computed the rest itself."""
        k = len(body.token_ids)
        request = move_load_request(self._deployment.model_name, body)
        details = (await self._complete(request))["usage"].get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        return k if cached >= k - 1 else cached

    async def _complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A non-streamed completion from the child, its errors as ours."""
        assert self._client is not None
        try:
            response = await self._client.post(self.url + "/v1/completions", json=request)
        except httpx.HTTPError as err:
            raise InstanceFailedError(f"vllm serve did not answer: {err!r}") from None
        if response.status_code != 200:
            raise child_error(response)
        return dict(response.json())

    def link_signals(self) -> list[LinkSignals]:
        """The connector's sender telemetry (its status file, refreshed every 0.5 s)."""
        return [LinkSignals(**link) for link in self.connector_status().get("links", [])]

    def _cache_layout(self) -> list[dict[str, Any]]:
        """The KV cache groups the connector reports (its worker writes the status file
        every 0.5 s from before vLLM answers /health)."""
        deadline = time.monotonic() + LAYOUT_TIMEOUT_S
        while time.monotonic() < deadline:
            layout = self.connector_status().get("cache_layout")
            if layout:
                return list(layout)
            time.sleep(0.2)
        self.stop()
        raise InstanceFailedError(f"the connector reported no cache layout in {LAYOUT_TIMEOUT_S} s")

    def connector_status(self) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):
            return dict(json.loads(self._status_path.read_text()))
        return {}

    # --- decode ------------------------------------------------------------------------

    def decode(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.DecodeRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Queue[Item]:
        """Stream the decode from the child; its connector loads the KV first."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        task = loop.create_task(self._stream(body, out))
        self._decodes[body.request_id] = task
        task.add_done_callback(lambda _: self._decodes.pop(body.request_id, None))
        return out

    async def _stream(self, body: p.DecodeRequest, out: asyncio.Queue[Item]) -> None:
        ids = [body.first_token]
        text = OutputText(self._tokenizer, body.token_ids, body.sampling.stop)
        stopped = text.add(body.first_token)  # the prefill checked the same stop strings
        finish: str | None = body.first_finish_reason or ("stop" if stopped else None)
        if body.first_finish_reason and not stopped:
            text.text = ""  # EOS or a stop token id: vLLM leaves that token out of the text
        if finish is None and body.sampling.max_tokens == 1:
            finish = "length"
        out.put_nowait(Token(body.first_token, text=text.delta(finished=finish is not None)))
        try:
            if finish is None:
                finish = await self._continue(body, ids, text, out)
            elif body.sampling.max_tokens > 1:  # no decode will load the staged KV
                with contextlib.suppress(ServeError):
                    await self._discard(body.request_id, body.first_token)  # else: deadline
        except Exception as err:
            out.put_nowait(err)
            return
        out.put_nowait(Finished(len(body.token_ids), tuple(ids), text.text, finish))

    async def _continue(
        self, body: p.DecodeRequest, ids: list[int], text: OutputText, out: asyncio.Queue[Item]
    ) -> str:
        """Decode from the first token on: the child's prompt is the prompt plus that token,
        whose KV the connector loads. Returns the finish reason; the child's error event (its
        engine died: vLLM sends it, then `[DONE]`) or a stream that ends without a finish
        reason raises `InstanceFailedError`, so a broken decode is never a short success."""
        assert self._client is not None
        request = {
            "model": self._deployment.model_name,
            "prompt": [*body.token_ids, body.first_token],
            **vllm_sampling(body.sampling, body.sampling.max_tokens - 1, stop=False),
            "stream": True,
            "kv_transfer_params": {"prfaas_recv": {"transfer_id": body.request_id}},
        }
        finish: str | None = None
        async with self._client.stream(
            "POST", self.url + "/v1/completions", json=request
        ) as response:
            if response.status_code != 200:
                await response.aread()
                raise child_error(response)
            async for line in split_lines(response.aiter_bytes()):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                for choice in choices(json.loads(line[6:])):
                    finish = choice.get("finish_reason") or finish
                    new = list(choice.get("token_ids") or [])
                    found = logprobs(choice, body.sampling.logprobs, self._tokenizer)
                    for k, token_id in enumerate(new):
                        ids.append(token_id)
                        last = finish is not None and k == len(new) - 1
                        # EOS or a stop token id (the child has no stop strings): not printed
                        stopped = False if last and finish == "stop" else text.add(token_id)
                        delta = text.delta(finished=last or stopped)
                        out.put_nowait(Token(token_id, found[k], text=delta))
                        if stopped:  # leaving the stream aborts it in vLLM
                            return "stop"
        if finish is None:
            raise InstanceFailedError("vLLM's decode stream ended without a finish reason")
        return finish

    async def _discard(self, request_id: str, token_id: int = 0) -> None:
        """Drop the KV staged for a request that gets no decode here: a one-token request
        (of any token) tells the connector, which would otherwise hold the bytes until its
        staging deadline; KV still on its way is dropped when it lands."""
        assert self._client is not None
        request = {
            "model": self._deployment.model_name,
            "prompt": [token_id],
            "max_tokens": 1,
            "kv_transfer_params": {"prfaas_recv": {"transfer_id": request_id, "discard": True}},
        }
        await self._complete(request)

    def cancel(self, request_id: str) -> None:
        """The request ends here without (more of) its decode: a running decode stream is
        closed (vLLM aborts it); a running prefill call too; else any KV staged or arriving
        for it is discarded."""
        prefill = self._prefills.pop(request_id, None)
        if prefill is not None:
            prefill.cancel()  # closing the call aborts the request in vLLM
            return
        task = self._decodes.pop(request_id, None)
        if task is not None:
            task.cancel()  # closing the stream aborts the request in vLLM
            return
        discard = asyncio.get_running_loop().create_task(self._discard_quietly(request_id))
        self._tasks.append(discard)
        discard.add_done_callback(self._tasks.remove)

    async def _discard_quietly(self, request_id: str) -> None:
        with contextlib.suppress(ServeError, httpx.HTTPError):
            await self._discard(request_id)  # else the staging deadline drops it

    # --- cache events ------------------------------------------------------------------

    def _drain(self) -> None:
        while self._pending:
            self._events.extend(self._translator.translate(self._pending.pop(0)))

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]:
        self._drain()
        return self._events.since(seq)

    def cached_prefix_tokens(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int]
    ) -> asyncio.Future[int]:
        """The prompt prefix this child's vLLM prefix cache holds (from its KV events)."""
        self._drain()
        fut: asyncio.Future[int] = loop.create_future()
        fut.set_result(self._translator.held_prefix_tokens(tokens))
        return fut
