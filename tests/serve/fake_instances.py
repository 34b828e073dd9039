"""`FakeInstanceClient`: the router's `InstanceClient` answered in process, without HTTP.

Each base URL is an instance of an emulated deployment that computes nothing: its prompts are
the byte tokenizer's, a prefill answers at once with first token 0, a decode streams
`max_tokens` tokens of `b"a"` (ignoring EOS). Like the emulated backend it declares
`prompt_in_kv_stream`: a prefill keeps its prompt for the decode of the same request id (its
"KV stream"), and a decode without ids and without such a prefill ends in an error line.
It keeps `calls`, every call as (url, endpoint, started, ended) in a global order, so a test
counts the calls made before a request's first token and which of them ran one after another.
A URL in `down` gets no answer (`CallBroke`); a URL the deployment does not name is down too.
An instance named in `receive_full` reports its KV receive buffer full in `/state`, and a
prefill shipping to it is refused as a real instance refuses it (503 `kv_buffer_full`).
`tests/serve/test_instance_client.py` holds it to the same contract as `HttpInstanceClient`
over real instances.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from serve_helpers import emulated_deployment, fake_info

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment, InstanceSpec
from prfaas.serve.errors import BadRequestError, KvBufferFullError
from prfaas.serve.instance.lease import LeaseBook
from prfaas.serve.json_lines import json_line
from prfaas.serve.router.instance_client import CallBroke, CallRefused

TOKEN_A = ord("a")
RECEIVE_PAGES = 8


def fake_deployment() -> Deployment:
    """`emulated_deployment` with a distinct (never dialled) port per instance: its URLs
    name the fake's instances."""
    deployment = emulated_deployment()
    instances = tuple(
        s.model_copy(update={"http_port": 1 + k, "transfer_port": 101 + k})
        for k, s in enumerate(deployment.instances)
    )
    return deployment.model_copy(update={"instances": instances})


@dataclass(slots=True)
class Call:
    url: str
    endpoint: str
    started: int
    ended: int | None = None


@dataclass(slots=True)
class FakeInstanceClient:
    deployment: Deployment
    down: set[str] = field(default_factory=set)
    receive_full: set[str] = field(default_factory=set)  # instance names
    calls: list[Call] = field(default_factory=list)
    books: dict[str, LeaseBook] = field(default_factory=dict)
    prompts: dict[str, list[int]] = field(default_factory=dict)  # by request id: "arrived"
    _clock: itertools.count[int] = field(default_factory=itertools.count)

    def _spec(self, url: str, endpoint: str) -> tuple[InstanceSpec, Call]:
        spec = next((s for s in self.deployment.instances if s.url == url), None)
        if spec is None or url in self.down:
            raise CallBroke(f"{url}{endpoint}: connection refused")
        call = Call(url, endpoint, next(self._clock))
        self.calls.append(call)
        return spec, call

    def _ended(self, call: Call) -> None:
        call.ended = next(self._clock)

    def _info(self, spec: InstanceSpec) -> p.InstanceInfo:
        info = fake_info(spec.name, spec.role.value, boot_id=f"boot-{spec.name}")
        update = {"byte_tokenizer": True, "prompt_in_kv_stream": True}
        capabilities = info.capabilities.model_copy(update=update)
        update = {"capabilities": capabilities, "vocab_size": 259}
        return info.model_copy(update={**update, "transfer_port": spec.transfer_port})

    async def info(self, url: str) -> p.InstanceInfo:
        spec, call = self._spec(url, "/info")
        self._ended(call)
        return self._info(spec)

    async def state(
        self, url: str, since: int, *, timeout_s: float, fresh_connection: bool = False
    ) -> p.InstanceState:
        spec, call = self._spec(url, "/state")
        self._ended(call)
        boot_id = f"boot-{spec.name}"
        free = 0 if spec.name in self.receive_full else RECEIVE_PAGES
        resources = p.ResourcesBody(receive_pages=RECEIVE_PAGES, receive_pages_free=free)
        return p.InstanceState(
            boot_id=boot_id, num_waiting=0, num_running=0, free_pages=1, events=[], next_seq=0,
            resources=resources,
        )  # fmt: skip

    async def tokenize(self, url: str, body: p.TokenizeRequest) -> p.TokenizeResult:
        _, call = self._spec(url, "/tokenize")
        self._ended(call)
        text = body.text if body.chat is None else p.transcript(body.chat.messages)
        ids = p.byte_prompt_ids(text, add_special_tokens=body.add_special_tokens)
        return p.TokenizeResult(token_ids=ids)

    async def detokenize(self, url: str, body: p.TokenizeResult) -> p.DetokenizeResult:
        _, call = self._spec(url, "/detokenize")
        self._ended(call)
        return p.DetokenizeResult(text=p.byte_text(body.token_ids))

    async def prefill(
        self, url: str, body: p.PrefillRequest, *, timeout_s: float
    ) -> p.PrefillResult:
        spec, call = self._spec(url, "/prefill")
        self._ended(call)
        if not spec.role.is_prefill:
            raise _refused(f"instance {spec.name} is not a prefill instance")
        names = {s.transfer_port: s.name for s in self.deployment.instances}
        target = names.get(body.decode_transfer_port)
        if target in self.receive_full:
            err = KvBufferFullError(f"{target}'s KV receive buffer is full")
            raise CallRefused(err.status_code, json.dumps(err.body()).encode())
        self.prompts[body.request_id] = body.token_ids
        return p.PrefillResult(
            request_id=body.request_id,
            first_token=TOKEN_A,
            hit_tokens=0,
            kv_bytes=len(body.token_ids),
            num_slices=1,
            prefill_s=0.0,
            transfer_s=0.0,
        )

    @contextlib.asynccontextmanager
    async def decode(
        self, url: str, body: p.DecodeCall, *, timeout_s: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        spec, call = self._spec(url, "/decode")
        if spec.role.is_prefill:
            self._ended(call)
            raise _refused(f"instance {spec.name} is not a decode instance")

        prompt = self.prompts.pop(body.request_id, None)
        if body.token_ids is not None:
            prompt = body.token_ids

        async def lines() -> AsyncIterator[bytes]:
            if prompt is None:
                yield json_line(p.DecodeChunk(error=f"no prompt ids for {body.request_id}"))
                return
            n = body.sampling.max_tokens
            for _ in range(n - 1):
                yield json_line(p.DecodeChunk(token_id=TOKEN_A, text="a"))
            final = p.DecodeChunk(
                finish_reason="length",
                num_prompt_tokens=len(prompt),
                num_completion_tokens=n,
                full_text="a" * n,
            )
            yield json_line(final)

        try:
            yield lines()
        finally:
            self._ended(call)

    async def cancel(self, url: str, body: p.CancelRequest, *, timeout_s: float) -> p.CancelResult:
        _, call = self._spec(url, "/cancel")
        self._ended(call)
        return p.CancelResult(request_id=body.request_id, cancelled_call=False)

    async def role(self, url: str, body: p.RoleRequest) -> p.InstanceInfo:
        spec, call = self._spec(url, "/role")
        self._ended(call)
        return self._info(spec).model_copy(update={"role": body.role})

    async def lease(self, url: str, body: p.LeaseRequest, *, timeout_s: float) -> p.LeaseAnswer:
        _, call = self._spec(url, "/lease")
        self._ended(call)
        return self._book(url).request(body)

    async def lease_release(
        self, url: str, body: p.LeaseRequest, *, timeout_s: float
    ) -> p.LeaseAnswer:
        _, call = self._spec(url, "/lease/release")
        self._ended(call)
        return self._book(url).release(body)

    async def drain(self, url: str, body: p.DrainRequest) -> p.LeaseAnswer:
        _, call = self._spec(url, "/drain")
        self._ended(call)
        return self._book(url).drain(body)

    def _book(self, url: str) -> LeaseBook:
        """The instance's lease book: the instances' own (`serve.instance.lease`)."""
        return self.books.setdefault(url, LeaseBook())

    async def cached(self, url: str, body: p.TokenizeResult) -> p.CachedResult:
        _, call = self._spec(url, "/cached")
        self._ended(call)
        return p.CachedResult(tokens=0)

    async def prefix_send(
        self, url: str, body: p.PrefixSendRequest, *, timeout_s: float
    ) -> p.PrefixSendResult:
        _, call = self._spec(url, "/prefix/send")
        self._ended(call)
        return p.PrefixSendResult(move_id=body.move_id, tokens=0, kv_bytes=0, num_slices=0)

    async def prefix_import(
        self, url: str, body: p.PrefixImportRequest, *, timeout_s: float
    ) -> p.PrefixImportResult:
        _, call = self._spec(url, "/prefix/import")
        self._ended(call)
        return p.PrefixImportResult(move_id=body.move_id, hit_tokens=0)

    async def aclose(self) -> None:
        return None


def _refused(message: str) -> CallRefused:
    err = BadRequestError(message)
    return CallRefused(err.status_code, json.dumps(err.body()).encode())
