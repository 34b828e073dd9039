"""Connection handshake: version, HMAC challenge-response authentication, then compatibility.

    client (sender)                                 server (receiver)
    HELLO  session, index, nonce_c            ->
                                              <-    CHALLENGE nonce_s, mac_s
    (client checks mac_s: the server knows the secret)
    AUTH   identity, flags, mac_c             ->
                                                    (server checks mac_c, then compatibility)
                                              <-    READY            or REJECT reason, text

    mac_s = HMAC-SHA256(secret, b"prfaas-server" + HELLO meta + nonce_s)
    mac_c = HMAC-SHA256(secret, b"prfaas-client" + HELLO meta + CHALLENGE meta + identity, flags)

Both nonces are fresh per connection, so a recorded exchange cannot be replayed, and each side
proves the secret to the other before any KV moves. What a peer that does not know the secret
learns: the protocol version, a session id and two random nonces. The compatibility facts
(model fingerprint, block size, hash seed, payload-check flag) travel in AUTH, sent only to a server
that proved the secret and covered by the client's MAC; the server compares them with its own (a
mismatch would otherwise fail silently: Dynamo PRs #1233, #2981) and refuses a mismatch with a
REJECT whose reason both sides raise as the same exception type.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
from dataclasses import asdict
from pathlib import Path

from prfaas.specs.model import ModelSpec
from prfaas.transfer.errors import (
    FrameError,
    HandshakeError,
    RejectReason,
    TransferError,
    handshake_error,
)
from prfaas.transfer.framing import Frame, FramedConnection, translated_errors
from prfaas.transfer.keys import SessionId
from prfaas.transfer.wire import (
    NONCE_BYTES,
    PROTOCOL_VERSION,
    Auth,
    Challenge,
    FrameKind,
    Hello,
    PeerIdentity,
    Reject,
)


def model_fingerprint(spec: ModelSpec) -> bytes:
    """SHA-256 over the model's cache-relevant architecture: every layer group, typed."""
    groups = [[type(g).__name__, asdict(g)] for g in spec.mixers]
    text = json.dumps({"name": spec.name, "mixers": groups}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).digest()


def checkpoint_fingerprint(model_dir: Path) -> bytes:
    """SHA-256 of a checkpoint's `config.json`: the fingerprint of a model prfaas's config
    reader does not know, which the vLLM backend serves as vLLM reads it (both the instance
    shell and the connector inside vLLM use it, so the two sides agree)."""
    return hashlib.sha256((model_dir / "config.json").read_bytes()).digest()


def identity_for(spec: ModelSpec, block_size_tokens: int, hash_seed: int) -> PeerIdentity:
    return PeerIdentity(model_fingerprint(spec), block_size_tokens, hash_seed)


def incompatibility(ours: PeerIdentity, theirs: PeerIdentity) -> Reject | None:
    """The first way two identities disagree, as the REJECT to send; None when compatible."""
    if ours.model_fingerprint != theirs.model_fingerprint:
        return Reject(
            RejectReason.MODEL_FINGERPRINT,
            f"model fingerprint {theirs.model_fingerprint.hex()[:16]} != "
            f"{ours.model_fingerprint.hex()[:16]}",
        )
    if ours.block_size_tokens != theirs.block_size_tokens:
        return Reject(
            RejectReason.BLOCK_SIZE,
            f"block size {theirs.block_size_tokens} != {ours.block_size_tokens} tokens",
        )
    if ours.hash_seed != theirs.hash_seed:
        return Reject(RejectReason.HASH_SEED, f"hash seed {theirs.hash_seed} != {ours.hash_seed}")
    return None


def _checks_differ(ours: bool, theirs: bool) -> Reject | None:
    """Payload checks are on at both ends or off at both: a receiver must never take a
    payload unchecked that its sender meant to be checked, nor the other way round."""
    if ours == theirs:
        return None
    state = {True: "on", False: "off"}
    return Reject(
        RejectReason.PAYLOAD_CHECKS, f"payload checks {state[theirs]} there, {state[ours]} here"
    )


def _server_mac(secret: bytes, hello: Hello, challenge: Challenge) -> bytes:
    message = b"prfaas-server" + hello.encode() + challenge.unsigned()
    return hmac.new(secret, message, hashlib.sha256).digest()


def _client_mac(secret: bytes, hello: Hello, challenge: Challenge, auth: Auth) -> bytes:
    message = b"prfaas-client" + hello.encode() + challenge.encode() + auth.unsigned()
    return hmac.new(secret, message, hashlib.sha256).digest()


async def _expect(conn: FramedConnection, kind: FrameKind) -> Frame:
    frame = await conn.read_frame()
    if frame.kind is FrameKind.REJECT:
        reject = Reject.decode(frame.meta)
        raise handshake_error(reject.reason, f"refused by {conn.peer_name}: {reject.message}")
    if frame.prefix.version != PROTOCOL_VERSION:
        raise handshake_error(RejectReason.VERSION, f"peer speaks v{frame.prefix.version}")
    if frame.kind is not kind:
        raise FrameError(f"expected {kind.name} during the handshake, got {frame.kind.name}")
    return frame


async def _refuse(conn: FramedConnection, reject: Reject) -> HandshakeError:
    """Tell the peer why (best effort) and return the exception to raise locally."""
    with contextlib.suppress(TransferError):
        await conn.send(FrameKind.REJECT, reject.encode())
    return handshake_error(reject.reason, f"{conn.peer_name}: {reject.message}")


async def client_handshake(
    conn: FramedConnection,
    *,
    secret: bytes,
    identity: PeerIdentity,
    payload_checks: bool,
    session_id: SessionId,
    connection_index: int,
    timeout_s: float,
) -> None:
    """Run the sender's side; raises a HandshakeError subclass when refused or refusing."""
    hello = Hello(session_id, connection_index, secrets.token_bytes(NONCE_BYTES))
    unsigned = Auth(identity, payload_checks, b"")
    with translated_errors(f"handshake with {conn.peer_name}"):
        await asyncio.wait_for(_client_steps(conn, secret, hello, unsigned), timeout_s)


async def _client_steps(conn: FramedConnection, secret: bytes, hello: Hello, ours: Auth) -> None:
    await conn.send(FrameKind.HELLO, hello.encode())
    challenge = Challenge.decode((await _expect(conn, FrameKind.CHALLENGE)).meta)
    if not hmac.compare_digest(challenge.server_mac, _server_mac(secret, hello, challenge)):
        raise await _refuse(
            conn, Reject(RejectReason.AUTHENTICATION, "server did not prove the shared secret")
        )
    auth = Auth(ours.identity, ours.payload_checks, _client_mac(secret, hello, challenge, ours))
    await conn.send(FrameKind.AUTH, auth.encode())
    await _expect(conn, FrameKind.READY)


async def server_handshake(
    conn: FramedConnection,
    secret: bytes,
    identity: PeerIdentity,
    payload_checks: bool,
    timeout_s: float,
) -> Hello:
    """Run the receiver's side; returns the admitted client's HELLO."""
    with translated_errors(f"handshake with {conn.peer_name}"):
        steps = _server_steps(conn, secret, identity, payload_checks)
        return await asyncio.wait_for(steps, timeout_s)


async def _server_steps(
    conn: FramedConnection, secret: bytes, identity: PeerIdentity, payload_checks: bool
) -> Hello:
    first = await conn.read_frame()
    if first.prefix.version != PROTOCOL_VERSION:
        raise await _refuse(
            conn, Reject(RejectReason.VERSION, f"v{first.prefix.version} is not supported")
        )
    if first.kind is not FrameKind.HELLO:
        raise await _refuse(conn, Reject(RejectReason.MALFORMED, "expected HELLO"))
    hello = Hello.decode(first.meta)
    unsigned = Challenge(secrets.token_bytes(NONCE_BYTES), b"")
    challenge = Challenge(unsigned.nonce, _server_mac(secret, hello, unsigned))
    await conn.send(FrameKind.CHALLENGE, challenge.encode())
    auth = Auth.decode((await _expect(conn, FrameKind.AUTH)).meta)
    if not hmac.compare_digest(auth.client_mac, _client_mac(secret, hello, challenge, auth)):
        raise await _refuse(
            conn, Reject(RejectReason.AUTHENTICATION, "client did not prove the shared secret")
        )
    reject = incompatibility(identity, auth.identity) or _checks_differ(
        payload_checks, auth.payload_checks
    )
    if reject is not None:
        raise await _refuse(conn, reject)
    await conn.send(FrameKind.READY, b"")
    return hello
