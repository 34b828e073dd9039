"""Signed calls to an instance's control API: only its own deployment's router gets through,
each call at the one instance it was meant for, once.

Every request to an instance (`serve.instance.runtime`) carries four headers:

    X-Prfaas-Instance    the name (from the deployment) of the instance the call is for
    X-Prfaas-Timestamp   integer Unix seconds when it was signed
    X-Prfaas-Nonce       32 random hex digits, never reused
    X-Prfaas-Signature   hex HMAC-SHA256(key, "prfaas-control-v2" || field || field ...)

over seven fields, each written as its length (u32, big-endian) then its bytes, so no two
different calls sign the same bytes whatever their fields hold:

    instance name · method · raw path · raw query (without "?") · SHA-256 of the body ·
    timestamp · nonce

`key = HMAC-SHA256(deployment secret, "prfaas-control")`: the transfer secret every process
of the deployment already shares, under its own label, so a control signature is never a
valid transfer-handshake MAC or the other way round. The router's client signs every request
(`ControlSigner`, an `httpx.Auth`, which finds the instance's name from the URL's
`host:http_port` in the deployment). An instance checks in two steps (`ControlGate`, run by
`serve.edge.guard.EdgeGuard`, which owns the body limits and timeouts):

    on the headers, before a byte of the body is read         401 unsigned; addressed to
                                                              another instance; more than
                                                              `window_s` (30 s) from its
                                                              clock; nonce already used
    on the whole body (bounded and timed by EdgeGuard)         401 bad signature; the nonce
                                                              is recorded only then

A nonce is remembered for 2 x `window_s` (a call signed `window_s` ahead of the instance's
clock stays fresh that long), then forgotten (`NonceBook`): the memory is bounded by the call
rate. A book holding `max_nonces` live nonces refuses new calls (503) rather than forget one
that could still be replayed.

What this does not do: hide the calls (an on-path observer reads prompts and tokens; run the
control network inside TLS or a private network for that) or survive clocks more than the
window apart. A nonce remembered by an instance is forgotten when it restarts: a call recorded
within the last `window_s` could be replayed once, to the same instance, after its restart.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from enum import Enum

import httpx
from starlette.types import Scope

from prfaas.serve.config.deployment import Deployment
from prfaas.serve.errors import AuthenticationError, NoCapacityError

INSTANCE_HEADER = "x-prfaas-instance"
TIMESTAMP_HEADER = "x-prfaas-timestamp"
NONCE_HEADER = "x-prfaas-nonce"
SIGNATURE_HEADER = "x-prfaas-signature"
LABEL = b"prfaas-control-v2"
WINDOW_S = 30.0
NONCE_HEX_CHARS = 32
MAX_TIMESTAMP_DIGITS = 12
MAX_NONCES = 1_000_000
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class ControlCall:
    """Everything one signature binds: one request, to one instance, at one time, once."""

    instance: str
    method: str
    path: str  # as sent, percent-encoded
    query: str  # as sent, without the "?"; "" when there is none
    body: bytes
    timestamp: str
    nonce: str


def control_key(secret: bytes) -> bytes:
    """The control API's HMAC key, derived from the deployment's shared secret."""
    return hmac.new(secret, b"prfaas-control", hashlib.sha256).digest()


def signature(key: bytes, call: ControlCall) -> str:
    """Hex MAC of one call: its fields length-prefixed, so none can spill into the next."""
    fields = (
        call.instance.encode(),
        call.method.encode(),
        call.path.encode("latin-1"),
        call.query.encode("latin-1"),
        hashlib.sha256(call.body).hexdigest().encode(),
        call.timestamp.encode(),
        call.nonce.encode(),
    )
    message = LABEL + b"".join(len(f).to_bytes(4, "big") + f for f in fields)
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def signed_headers(
    key: bytes,
    instance: str,
    method: str,
    target: str,
    *,
    body: bytes = b"",
    now_s: float | None = None,
) -> dict[str, str]:
    """The headers that sign a call of `method` on `target` (path plus `?query` when there is
    one) with `body`, for the instance named `instance`."""
    path, _, query = target.partition("?")
    call = ControlCall(
        instance=instance,
        method=method,
        path=path,
        query=query,
        body=body,
        timestamp=str(int(time.time() if now_s is None else now_s)),
        nonce=secrets.token_hex(NONCE_HEX_CHARS // 2),
    )
    return {
        INSTANCE_HEADER: call.instance,
        TIMESTAMP_HEADER: call.timestamp,
        NONCE_HEADER: call.nonce,
        SIGNATURE_HEADER: signature(key, call),
    }


class ControlSigner(httpx.Auth):
    """Signs every request of an httpx client to the instances of `deployment` (the router's
    client, operator tools); a URL that is no instance's `host:http_port` is a ValueError."""

    requires_request_body = True

    def __init__(self, secret: bytes, deployment: Deployment) -> None:
        self._key = control_key(secret)
        self._names = {
            (spec.host.lower(), spec.http_port): spec.name for spec in deployment.instances
        }

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        url = request.url
        name = self._names.get((url.host, url.port or 80))
        if name is None:
            raise ValueError(f"{url.host}:{url.port} is not an instance of this deployment")
        target = url.raw_path.decode("ascii")
        request.headers.update(
            signed_headers(self._key, name, request.method, target, body=request.content)
        )
        yield request


class Admission(Enum):
    """What `NonceBook.admit` made of a nonce."""

    FRESH = "fresh"  # first seen within the window: recorded
    REPLAYED = "replayed"  # already seen within the window
    FULL = "full"  # the book holds `max_nonces` live nonces: not recorded


@dataclass(slots=True)
class NonceBook:
    """Nonces seen within 2 x `window_s` (oldest first), forgotten once they are older: a
    nonce signed with a timestamp the window allows is never forgotten while it is fresh."""

    window_s: float
    max_nonces: int = MAX_NONCES
    _seen: OrderedDict[str, float] = field(default_factory=OrderedDict)

    def has_seen(self, nonce: str, now_s: float) -> bool:
        self._expire(now_s)
        return nonce in self._seen

    def admit(self, nonce: str, now_s: float) -> Admission:
        """Record `nonce` the first time it is seen within the window."""
        if self.has_seen(nonce, now_s):
            return Admission.REPLAYED
        if len(self._seen) >= self.max_nonces:
            return Admission.FULL
        self._seen[nonce] = now_s
        return Admission.FRESH

    def _expire(self, now_s: float) -> None:
        while self._seen:
            oldest, seen_s = next(iter(self._seen.items()))
            if now_s - seen_s <= 2 * self.window_s:
                return
            del self._seen[oldest]


@dataclass(frozen=True, slots=True)
class _SignedHead:
    instance: str
    timestamp: str
    nonce: str
    mac: str


class ControlGate:
    """An instance's check of signed calls, for `serve.edge.guard.EdgeGuard` (its `BodyGate`): the
    headers before the body is read, the signature once it is."""

    def __init__(
        self,
        secret: bytes,
        instance: str,
        *,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = control_key(secret)
        self._instance = instance
        self._window_s = window_s
        self._clock = clock
        self._nonces = NonceBook(window_s)

    def check_head(self, scope: Scope) -> None:
        """Refuse (401) what no body can make valid: unsigned, for another instance, stale,
        replayed."""
        head = _signed_head(scope)
        if head.instance != self._instance:
            raise AuthenticationError(
                f"control request signed for instance {head.instance[:64]!r}, not for this "
                f"one ({self._instance}): a signed call is valid at its own instance only"
            )
        now_s = self._clock()
        signed_s = int(head.timestamp)
        if abs(now_s - signed_s) > self._window_s:
            raise AuthenticationError(
                f"stale control request (signed {now_s - signed_s:+.0f} s from now; "
                f"the window is {self._window_s:.0f} s)"
            )
        if self._nonces.has_seen(head.nonce, now_s):
            raise _replayed()

    def check_body(self, scope: Scope, body: bytes) -> None:
        """Refuse (401) a call whose signature does not match it; record its nonce."""
        head = _signed_head(scope)
        call = ControlCall(
            instance=self._instance,
            method=scope["method"],
            path=(scope.get("raw_path") or scope["path"].encode()).decode("latin-1"),
            query=scope.get("query_string", b"").decode("latin-1"),
            body=body,
            timestamp=head.timestamp,
            nonce=head.nonce,
        )
        if not hmac.compare_digest(head.mac, signature(self._key, call)):
            raise AuthenticationError("bad control request signature")
        admitted = self._nonces.admit(head.nonce, self._clock())
        if admitted is Admission.REPLAYED:  # a twin that passed check_head meanwhile
            raise _replayed()
        if admitted is Admission.FULL:
            raise NoCapacityError(
                f"more than {self._nonces.max_nonces} control calls within "
                f"{2 * self._window_s:.0f} s: try again later"
            )


def _signed_head(scope: Scope) -> _SignedHead:
    headers = {name.decode("latin-1"): value for name, value in scope["headers"]}
    try:
        head = _SignedHead(
            instance=headers[INSTANCE_HEADER].decode("ascii"),
            timestamp=headers[TIMESTAMP_HEADER].decode("ascii"),
            nonce=headers[NONCE_HEADER].decode("ascii"),
            mac=headers[SIGNATURE_HEADER].decode("ascii"),
        )
    except (KeyError, UnicodeDecodeError):
        raise AuthenticationError(
            "unsigned control request (this instance takes calls from its router only)"
        ) from None
    if not (head.timestamp.isdigit() and len(head.timestamp) <= MAX_TIMESTAMP_DIGITS):
        raise AuthenticationError("a control request's timestamp is integer Unix seconds")
    if len(head.nonce) != NONCE_HEX_CHARS or not set(head.nonce) <= _HEX:
        raise AuthenticationError(f"a control request's nonce is {NONCE_HEX_CHARS} hex digits")
    return head


def _replayed() -> AuthenticationError:
    return AuthenticationError("replayed control request (nonce already used)")
