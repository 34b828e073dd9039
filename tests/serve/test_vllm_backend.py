"""End to end with vLLM engines: `backend: vllm` instances behind prfaas's router.

For each tiny checkpoint (Llama float32 and the hybrid Qwen3-Next bf16, built by the test with
a fixed seed), one deployment
(a PrfaaS prefill, a PD prefill and a PD decode instance, each a managed `vllm serve` child)
and, once it is up, one plain `vllm serve` as the reference.
Two routers share the instances: one with t = 0 (every request goes PrfaaS: vLLM prefill ->
the inter-cluster link -> vLLM decode) and one with t huge (every request PD-P). Engine starts
are slow on 2 cores (~30-100 s each), so the module starts 4 engines per model and the fault
test runs last for each model (it kills the PrfaaS instance).

The prefill samples the first token and the decode computes from it on, so both models' greedy
text must equal the single engine's exactly. vLLM on CPU is not batch invariant: its attention
kernel splits a sequence's KV across threads or not as it schedules each step, and the split
changes bf16 rounding, which flips this random-weight Qwen3-Next's tokens now and then (in 3 of
23 prompt lengths, docs/vllm.md). Every engine here therefore runs with one reduction order
(`VLLM_CPU_ATTN_SPLIT_KV=0`), the reference too, which also runs with the instances' engine
settings (prefix caching on: vLLM's "align" mamba mode for Qwen3-Next).

Needs the vLLM venv, which `make test` builds first (`make setup-vllm`); `make test-vllm` runs
this module alone (marker `vllm`).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from vllm_helpers import (
    LONG,
    MAX_TOKENS,
    SECRET,
    SHORT,
    complete,
    start_reference,
    stop_all,
    stream_texts,
    vllm_instance,
    wait_ok,
)

from prfaas.serve import protocol as p
from prfaas.serve.backends.vllm.child import vllm_python
from prfaas.serve.config.deployment import (
    ADMIN_TOKEN_ENV_VAR,
    Deployment,
    InstanceRole,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
    child_environment,
    free_port,
)
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.launch.launcher import Launcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.vllm]

REQUEST_TIMEOUT_S = 120.0
DTYPES = {"llama": "float32", "qwen3-next": "bfloat16"}


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    root = tmp_path_factory.mktemp("vllm-models")
    out = {}
    for preset in DTYPES:
        target = root / preset
        subprocess.run(
            [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", preset, str(target)],
            check=True,
            capture_output=True,
        )
        out[preset] = target
    return out


@pytest.fixture(scope="module")
def engine_env() -> Iterator[None]:
    """The environment every engine of this module starts in (children inherit it)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
        env.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")  # one reduction order (module docstring)
        yield


@dataclass
class Stack:
    preset: str
    launcher: Launcher
    prfaas_url: str  # router with t = 0: every request takes the PrfaaS path
    pd_url: str  # router with t huge: every request PD-P
    reference_url: str  # a plain `vllm serve` of the same checkpoint
    model: str
    processes: list[subprocess.Popen[bytes]]


def _deployment(model_dir: Path, preset: str) -> Deployment:
    return Deployment(
        model=str(model_dir),
        served_model_name=f"tiny-{preset}",
        block_tokens=64,
        threshold_tokens=0,
        router=RouterSpec(port=0, request_timeout_s=REQUEST_TIMEOUT_S),
        link=LinkSpec(rate_gbps=1.0, rtt_ms=0),
        rebalance=RebalanceSpec(enabled=False),
        vllm=VllmSpec(dtype=DTYPES[preset], max_model_len=4096, start_timeout_s=1500),
        instances=(
            vllm_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
            vllm_instance("pdp-0", InstanceRole.PD_PREFILL, "pd"),
            vllm_instance("pdd-0", InstanceRole.PD_DECODE, "pd"),
        ),
    )


def _second_router(
    launcher: Launcher, threshold_tokens: int
) -> tuple[str, subprocess.Popen[bytes]]:
    d = launcher.deployment
    port = free_port()
    other = d.model_copy(
        update={
            "threshold_tokens": threshold_tokens,
            "router": d.router.model_copy(update={"port": port}),
        }
    )
    handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
    with handle:
        yaml.safe_dump(other.model_dump(mode="json"), handle)
    argv = [sys.executable, "-m", "prfaas", "router", handle.name]
    env = child_environment(other) | {ADMIN_TOKEN_ENV_VAR: launcher.admin_token}  # one key
    child = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
    return f"http://127.0.0.1:{port}", child


@pytest.fixture(scope="module", params=list(DTYPES))
def stack(
    request: pytest.FixtureRequest, model_dirs: dict[str, Path], engine_env: None
) -> Iterator[Stack]:
    preset = request.param
    model_dir = model_dirs[preset]
    ref_port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    launcher = Launcher(_deployment(model_dir, preset))
    launcher.start()
    try:
        launcher.wait_healthy()
        # after the deployment: less contention
        processes.append(start_reference(model_dir, f"tiny-{preset}", ref_port, DTYPES[preset]))
        pd_url, router = _second_router(launcher, 10**6)
        processes.append(router)
        wait_ok(pd_url, "/health", 120)
        reference_url = f"http://127.0.0.1:{ref_port}"
        wait_ok(reference_url, "/health", 600)
        yield Stack(
            preset, launcher, launcher.url, pd_url, reference_url, f"tiny-{preset}", processes
        )
    finally:
        launcher.stop()
        stop_all(processes)


def _state(stack: Stack, url: str | None = None) -> dict[str, Any]:
    """A router's /admin/state (both routers serve the same deployment: one admin key)."""
    headers = stack.launcher.admin_headers
    answer = httpx.get((url or stack.prfaas_url) + "/admin/state", headers=headers, timeout=10)
    return dict(answer.json())


def test_info_reports_the_vllm_backends_capabilities(stack: Stack) -> None:
    """What the vllm backend declares in `/info` (`InstanceInfo.capabilities`): its engine
    ships its own KV, answers `/cached`, renders chats, computes logprobs and runs a chat to
    the context; it moves prefixes on a dense model only (docs/vllm.md, Limits)."""
    hybrid = stack.preset == "qwen3-next"
    for spec in stack.launcher.deployment.instances:
        info = httpx.get(spec.url + "/info", auth=stack.launcher.instance_auth(), timeout=30)
        said = p.InstanceInfo.model_validate_json(info.content).capabilities
        assert said == p.CapabilitiesBody(
            ships_own_kv=True,
            moves_prefixes=not hybrid,
            reports_cached_prefix=True,
            renders_chat=True,
            computes_logprobs=True,
            chat_runs_to_context=True,
            tokenizer_from_model_dir=(
                Path(stack.launcher.deployment.model) / "tokenizer.json"
            ).is_file(),
        )


# 511 bytes + <bos>: the prompt ends on a block boundary, where a hybrid decode side in vLLM's
# "align" mode cannot take a moved state and computes the prompt itself (docs/vllm.md); its
# own start, so that no instance holds a prefix of it
ON_BOUNDARY = ("On a block boundary. " + LONG)[:511]


@pytest.mark.parametrize(
    "prompt", [SHORT, LONG, ON_BOUNDARY], ids=["short", "long", "on-block-boundary"]
)
def test_greedy_text_through_prfaas_and_pd_equals_one_vllm(stack: Stack, prompt: str) -> None:
    expected = complete(stack.reference_url, stack.model, prompt)["choices"][0]["text"]
    via_prfaas = complete(stack.prfaas_url, stack.model, prompt)
    via_pd = complete(stack.pd_url, stack.model, prompt)
    assert via_prfaas["prfaas"]["path"] == "prfaas"
    assert via_pd["prfaas"]["path"] == "pd-p"
    assert via_prfaas["choices"][0]["text"] == expected
    assert via_pd["choices"][0]["text"] == expected
    assert via_prfaas["usage"]["completion_tokens"] == MAX_TOKENS
    assert via_prfaas["prfaas"]["kv_bytes"] > 0
    if prompt is LONG:
        assert via_prfaas["usage"]["prompt_tokens"] > 1000


def test_first_token_endings_and_stop_strings_match_one_vllm(stack: Stack) -> None:
    """The prefill decides whether its token ended the request; stop strings after it are
    checked on the joined text: one starting in the first token's text must still stop."""
    prompt = "Stops. " + LONG
    one = complete(stack.reference_url, stack.model, prompt, max_tokens=1)["choices"][0]
    via_one = complete(stack.prfaas_url, stack.model, prompt, max_tokens=1)
    assert via_one["choices"][0]["text"] == one["text"]
    assert via_one["choices"][0]["finish_reason"] == one["finish_reason"]
    assert via_one["prfaas"]["kv_bytes"] == 0  # nothing to decode: nothing shipped
    full = complete(stack.reference_url, stack.model, prompt)["choices"][0]["text"]
    head = len(one["text"])
    stops = {full[max(0, head - 1) : head + 1], full[:1], full[-2:]} - {""}
    assert stops, full
    for stop in sorted(stops):
        expected = complete(stack.reference_url, stack.model, prompt, stop=[stop])["choices"][0]
        got = complete(stack.prfaas_url, stack.model, prompt, stop=[stop])["choices"][0]
        assert (got["text"], got["finish_reason"]) == (
            expected["text"],
            expected["finish_reason"],
        ), stop
        # streamed as vLLM streams: no delta shows text the stop string later cuts off
        pieces = stream_texts(stack.prfaas_url, stack.model, prompt, stop=[stop])
        assert "".join(pieces) == expected["text"], stop
    # a first-token stop discarded its staged KV: well before the staging deadline would
    _wait_decode_side_empty(stack, REQUEST_TIMEOUT_S / 2)


def _wait_decode_side_empty(stack: Stack, timeout_s: float) -> None:
    """Until the decode instance holds no transfer, sink page or request (the connector's
    status file is refreshed every 0.5 s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _connector_status(stack, "pdd-0")
        state = _instance_state(stack, "pdd-0")
        if (
            status["active_receives"] == 0
            and status["staged_transfers"] == 0
            and status["sink_free_pages"] == status["sink_total_pages"]
            and state["num_running"] == 0
            and state["num_waiting"] == 0
        ):
            return
        time.sleep(0.5)
    pytest.fail(f"the decode side still holds something: {status}, {state}")


@pytest.mark.parametrize("url", ["prfaas_url", "pd_url"], ids=["prfaas", "pd-p"])
def test_logprobs_are_vllms_own(stack: Stack, url: str) -> None:
    """The first token's logprobs come from the prefill child, the rest from the decode
    child: together the numbers `vllm serve` alone reports for the same prompt tokens, on
    completions and chat."""
    prompt = "Logprobs. " + SHORT
    fields: dict[str, Any] = {"logprobs": 3, "max_tokens": 6}
    # the reference keyed by token id: byte tokens' texts collide ("\ufffd") in a text-keyed
    # dict, where vLLM keeps the last (worst) and prfaas the first (best) of them
    expected = complete(
        stack.reference_url, stack.model, prompt, return_tokens_as_token_ids=True, **fields
    )["choices"][0]
    got = complete(getattr(stack, url), stack.model, prompt, **fields)["choices"][0]
    assert got["text"] == expected["text"]
    want, have = expected["logprobs"], got["logprobs"]
    assert have["token_logprobs"] == pytest.approx(want["token_logprobs"], abs=1e-5)
    for mine, theirs in zip(have["top_logprobs"], want["top_logprobs"], strict=True):
        assert max(mine.values()) == pytest.approx(max(theirs.values()), abs=1e-5)
        for value in mine.values():
            assert any(value == pytest.approx(v, abs=1e-5) for v in theirs.values())
    # chat: the model's chat template renders the messages, as in vllm serve alone
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}]
    body = {"model": stack.model, "messages": messages}
    chat = body | {"max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    answers = [
        httpx.post(base + "/v1/chat/completions", json=chat, timeout=600).json()["choices"][0]
        for base in (getattr(stack, url), stack.reference_url)
    ]
    assert answers[0]["message"]["content"] == answers[1]["message"]["content"]
    have, want = (answer["logprobs"]["content"] for answer in answers)
    assert [e["logprob"] for e in have] == pytest.approx([e["logprob"] for e in want], abs=1e-5)
    assert all(len(entry["top_logprobs"]) == 2 for entry in have)


@pytest.mark.parametrize(
    "switches",
    [{}, {"add_generation_prompt": False, "continue_final_message": True}],
    ids=["generation-prompt", "continue-final-message"],
)
def test_chats_are_rendered_by_vllms_chat_template(stack: Stack, switches: dict[str, Any]) -> None:
    """`/tokenize` with messages gives vllm serve's ids (its chat template, the tiny
    model's unlike prfaas's plain transcript), and a chat whose last message the model
    continues generates what vllm serve generates."""
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Two"}, {"type": "text", "text": "parts"}],
        },
        {"role": "assistant", "content": "The lazy"},
    ]
    body = {"model": stack.model, "messages": messages, **switches}
    ids = [
        httpx.post(base + "/tokenize", json=body, timeout=60).json()["tokens"]
        for base in (stack.prfaas_url, stack.reference_url)
    ]
    assert ids[0] == ids[1]
    assert ids[0][0] == 1  # the template's <bos>: not a transcript
    chat = body | {"max_tokens": MAX_TOKENS, "temperature": 0}
    texts = [
        httpx.post(base + "/v1/chat/completions", json=chat, timeout=600).json()
        for base in (stack.pd_url, stack.reference_url)
    ]
    got, expected = (t["choices"][0]["message"] for t in texts)
    assert (got["role"], got["content"]) == (expected["role"], expected["content"])
    assert texts[0]["usage"]["prompt_tokens"] == len(ids[0])


def test_unset_sampling_fields_take_the_models_generation_config(stack: Stack) -> None:
    """The tiny models' generation_config.json says top_k 1: a request that names neither
    temperature nor top_k is greedy in `vllm serve` alone, and so through prfaas (which
    would otherwise sample at its own defaults, temperature 1 and no top_k). Compared with
    the greedy text only: `vllm serve`'s own defaulted run of the bf16 Qwen3-Next once gave
    another text than its greedy run from the fourth character (a fresh clone's make test,
    2026-12-04), while prfaas's equalled the greedy text."""
    prompt = "Defaults. " + SHORT
    body = {"model": stack.model, "prompt": prompt, "max_tokens": MAX_TOKENS}
    defaulted = httpx.post(stack.prfaas_url + "/v1/completions", json=body, timeout=600)
    greedy = complete(stack.reference_url, stack.model, prompt)["choices"][0]["text"]
    assert defaulted.json()["choices"][0]["text"] == greedy


def test_a_chat_without_max_tokens_may_fill_the_context(stack: Stack) -> None:
    """As in `vllm serve` alone, a chat that names no `max_tokens` runs to the end of the
    context (completions: 16): here a prompt 6 tokens short of it.

    The text must equal the single engine's unless the two greedy paths part at a near tie:
    the decode child computes the first output token in a one-token prefill where the single
    engine runs a decode step, and on some CPUs the last digits of a random-weight model's
    logits differ between those kernels (seen on another host: equal until the last three
    tokens). A parting where the reference's two best tokens are not within 0.1 fails."""
    probe = {"model": stack.model, "messages": [{"role": "user", "content": ""}]}
    overhead = httpx.post(stack.pd_url + "/tokenize", json=probe, timeout=60).json()["count"]
    content = (LONG * 5)[: 4096 - 6 - overhead]  # byte-level: one token per character
    body = {
        "model": stack.model,
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    answers = [
        httpx.post(base + "/v1/chat/completions", json=body, timeout=600)
        for base in (stack.pd_url, stack.reference_url)
    ]
    got, expected = (answer.json() for answer in answers)
    counts = ("prompt_tokens", "completion_tokens")
    assert [got["usage"][k] for k in counts] == [expected["usage"][k] for k in counts]
    assert got["usage"]["prompt_tokens"] == 4090
    assert got["choices"][0]["finish_reason"] == expected["choices"][0]["finish_reason"]
    texts = [answer["choices"][0]["message"]["content"] for answer in (got, expected)]
    if texts[0] == texts[1]:
        return
    # parted: at a near tie, or the text of equal tokens was lost (a defect). At a near tie the
    # two chosen tokens' logprobs agree too, and byte tokens share a text, so the first token
    # seen to differ may come a step later: a near tie at or before it
    have, want = (answer["choices"][0]["logprobs"]["content"] for answer in (got, expected))
    parted = next(
        (k for k, (a, b) in enumerate(zip(have, want, strict=True)) if a["bytes"] != b["bytes"]),
        None,
    )
    assert parted is not None, f"the same tokens, other text: {texts}"
    gaps = [_top_two_gap(step) for step in want[: parted + 1]]
    assert min(gaps) < 0.1, f"parted at token {parted} of {len(want)} without a near tie"


def _top_two_gap(step: dict[str, Any]) -> float:
    best, second = sorted((e["logprob"] for e in step["top_logprobs"]), reverse=True)
    return float(best - second)


def test_repeated_long_prompt_hits_vllms_prefix_cache(stack: Stack) -> None:
    prompt = "A fresh document. " + LONG
    first = complete(stack.prfaas_url, stack.model, prompt)
    time.sleep(1.5)  # the router pulls cache events every poll_interval_s
    second = complete(stack.prfaas_url, stack.model, prompt)
    assert second["choices"][0]["text"] == first["choices"][0]["text"]
    assert first["prfaas"]["hit_tokens"] == 0
    assert second["prfaas"]["prefill_instance"] == first["prfaas"]["prefill_instance"]
    assert second["prfaas"]["hit_tokens"] >= 1024  # vLLM computed only the tail
    decisions = reversed(_state(stack)["recent_decisions"])
    record = next(r for r in decisions if r["status"] == "completed")
    assert record["reused_prefix_tokens"] >= 1024  # the index, fed by vLLM's events, agreed
    if stack.preset == "llama":
        # the decode instance held the prompt too: only what it lacked was shipped
        assert second["prfaas"]["kv_bytes"] < first["prfaas"]["kv_bytes"]
    else:
        # a hybrid decode side holds the moved state at the prompt's end, not at a block
        # boundary, so vLLM keeps no restorable prefix there: the whole prompt ships again
        assert second["prfaas"]["kv_bytes"] == first["prfaas"]["kv_bytes"]


def _wait_router_holds(stack: Stack, url: str, name: str, prompt: str, tokens: int) -> None:
    """Until instance `name`'s vLLM holds at least `tokens` of the prompt (its KV events,
    which arrive over ZMQ after the response) and the router at `url` applied them all."""
    ids = httpx.post(url + "/tokenize", json={"model": stack.model, "prompt": prompt}).json()
    instance = stack.launcher.deployment.instance(name).url
    signed = stack.launcher.instance_auth()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = {"token_ids": p.pack_token_ids(ids["tokens"])}
        held = httpx.post(instance + "/cached", json=body, auth=signed)
        published = httpx.get(instance + "/state", params={"since": 10**9}, auth=signed)
        seen = next(i for i in _state(stack, url)["instances"] if i["name"] == name)
        if (
            held.json()["tokens"] >= tokens
            and seen["cache_events_applied"] >= published.json()["next_seq"]
        ):
            return
        time.sleep(0.2)
    pytest.fail(f"the router at {url} never saw {name} hold {tokens} tokens of the prompt")


@pytest.mark.parametrize(
    ("first", "second", "source", "target"),
    [
        ("prfaas_url", "pd_url", "prfaas-0", "pdp-0"),
        ("pd_url", "prfaas_url", "pdp-0", "prfaas-0"),
    ],
    ids=["prfaas-to-pd", "pd-to-prfaas"],
)
def test_cache_moves_run_between_vllm_instances(
    stack: Stack, first: str, second: str, source: str, target: str
) -> None:
    """The scheduler's `CacheMove` on vLLM instances: a prompt served on one path leaves its
    prefix in that prefill instance's vLLM cache; the other router sends the same prompt the
    other way, finds the longer prefix in the other cluster (bandwidth plentiful) and has the
    holder's vLLM ship it to the target's, which then prefills only the tail (vLLM's own
    count) and gives the single engine's text. A hybrid model's prefixes do not move on vLLM
    (docs/vllm.md, Limits): its router schedules by the no-move rules instead."""
    prompt = f"Moved from {source}. " + LONG
    expected = complete(stack.reference_url, stack.model, prompt)["choices"][0]["text"]
    before = complete(getattr(stack, first), stack.model, prompt)
    assert before["prfaas"]["prefill_instance"] == source
    _wait_router_holds(stack, getattr(stack, second), source, prompt, 1024)
    after = complete(getattr(stack, second), stack.model, prompt)
    assert after["prfaas"]["prefill_instance"] == target
    assert after["choices"][0]["text"] == expected
    decisions = reversed(_state(stack, getattr(stack, second))["recent_decisions"])
    record = next(r for r in decisions if r["status"] == "completed")
    assert record["mode"] == "plentiful"
    if stack.preset == "qwen3-next":
        assert "move" not in record and record["reason"].startswith("plentiful-no-move"), record
        return
    move = record["move"]
    assert (move["source"], move["target"], move["status"]) == (source, target, "done"), move
    assert move["tokens"] == move["hit_tokens"] >= 1024
    assert move["kv_bytes"] > 0
    assert after["prfaas"]["hit_tokens"] >= move["tokens"]  # the target's vLLM hit the move


def test_a_flip_that_would_leave_a_pd_role_empty_is_refused_with_the_reason(
    stack: Stack,
) -> None:
    """The slow loop's role flip, asked by hand, on this one-prefill one-decode PD cluster:
    either flip would leave a role without an instance, so the router refuses it (409, the
    reason) and both vLLM instances keep serving in their roles. (A vLLM child is
    role-agnostic, `kv_both`: a flip that is allowed is the instance shell's alone, as for
    the other backends, tests/serve/test_role_flips.py.)"""
    for name, role, emptied in (
        ("pdp-0", "pd-decode", "pd-prefill"),
        ("pdd-0", "pd-prefill", "pd-decode"),
    ):
        url = f"{stack.prfaas_url}/admin/instances/{name}/role"
        answer = httpx.post(
            url, json={"role": role}, headers=stack.launcher.admin_headers, timeout=30
        )
        assert answer.status_code == 409, answer.text
        assert f"instance {name} is the last healthy {emptied}" in answer.json()["error"]["message"]
    placed = complete(stack.pd_url, stack.model, "Not flipped. " + SHORT)["prfaas"]
    assert (placed["prefill_instance"], placed["decode_instance"]) == ("pdp-0", "pdd-0")


def _connector_status(stack: Stack, name: str) -> dict[str, Any]:
    pid = stack.launcher.children[name].pid
    path = Path(f"/tmp/prfaas-vllm-{name}-{pid}.json")
    return dict(json.loads(path.read_text()))


def test_kv_staged_for_a_cancelled_request_is_dropped_at_once(stack: Stack) -> None:
    """A prefill whose decode never comes (its client left between the two) leaves its KV
    staged in the decode side's connector; the router's `/cancel` there drops it at once,
    not at the staging deadline (REQUEST_TIMEOUT_S)."""
    deployment, signed = stack.launcher.deployment, stack.launcher.instance_auth()
    prefill, decode = deployment.instance("prfaas-0"), deployment.instance("pdd-0")
    ids = httpx.post(
        stack.prfaas_url + "/tokenize", json={"model": stack.model, "prompt": "Left. " + LONG}
    ).json()["tokens"]
    sampling = {"max_tokens": 8, "temperature": 0, "top_p": 1, "top_k": 0, "seed": 0}
    body = {
        "request_id": "cmpl-left-between-prefill-and-decode",
        "token_ids": p.pack_token_ids(ids),
        "sampling": sampling,
        "decode_transfer_host": decode.host,
        "decode_transfer_port": decode.transfer_port,
    }
    shipped = httpx.post(prefill.url + "/prefill", json=body, auth=signed, timeout=600)
    assert shipped.status_code == 200 and shipped.json()["kv_bytes"] > 0, shipped.text
    deadline = time.monotonic() + 30
    while _connector_status(stack, "pdd-0")["staged_transfers"] == 0:
        assert time.monotonic() < deadline, "the KV never showed as staged on pdd-0"
        time.sleep(0.5)
    cancelled = httpx.post(
        decode.url + "/cancel", json={"request_id": body["request_id"]}, auth=signed, timeout=60
    )
    assert cancelled.status_code == 200, cancelled.text
    _wait_decode_side_empty(stack, REQUEST_TIMEOUT_S / 4)


def test_killing_the_vllm_prefill_mid_request_retries_and_pins_nothing(stack: Stack) -> None:
    prompt = "Killed mid-prefill. " + LONG * 2
    expected = complete(stack.reference_url, stack.model, prompt)["choices"][0]["text"]
    result: dict[str, Any] = {}

    def run() -> None:
        body = {"model": stack.model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
        response = httpx.post(stack.prfaas_url + "/v1/completions", json=body, timeout=600)
        result["status"] = response.status_code
        result["body"] = response.json()

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the PrfaaS instance has the prefill in progress
        state = _instance_state(stack, "prfaas-0")
        if state["active_prefills"]:
            break
        time.sleep(0.05)
    stack.launcher.children["prfaas-0"].send_signal(signal.SIGKILL)
    thread.join(timeout=600)
    assert result["status"] == 200, result
    # retried on the PD cluster, or (the kill landed after the prefill had handed its KV over)
    # finished on the PrfaaS path it started on: the client sees one right answer either way
    assert result["body"]["prfaas"]["path"] in ("pd-p", "prfaas")
    assert result["body"]["choices"][0]["text"] == expected
    # a transfer that landed but whose decode never came is dropped after request_timeout_s
    _wait_decode_side_empty(stack, REQUEST_TIMEOUT_S + 30)


def _instance_state(stack: Stack, name: str) -> dict[str, Any]:
    url = stack.launcher.deployment.instance(name).url + "/state"
    return dict(httpx.get(url, auth=stack.launcher.instance_auth(), timeout=5).json())
