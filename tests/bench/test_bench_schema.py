"""`prfaas bench` JSON against the `prfaas.metrics/1` schema: a third-party-style endpoint, and
the live default deployment (`prfaas up`, torch backend) started here as real processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from bench_fake_server import FakeServer
from typer.testing import CliRunner

from prfaas.cli.app import app
from prfaas.metrics import validate_metrics
from prfaas.serve.config.deployment import RouterSpec, default_deployment

runner = CliRunner()
UP_TIMEOUT_S = 180.0


def test_bench_json_validates_against_a_third_party_endpoint(fake_server: FakeServer) -> None:
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=32,out=4"]
    result = runner.invoke(app, [*args, "--num-requests", "5", "--rate", "100", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema"] == "prfaas.bench/1" and report["wall_s"] > 0
    metrics = validate_metrics(report["metrics"])
    assert (metrics.num_completed, metrics.num_failed) == (5, 0)


def _lines(stream: object, out: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        out.put(line)


@pytest.fixture
def prfaas_up(tmp_path: Path) -> Iterator[str]:
    """`prfaas up` of the default deployment (router on a free port); its URL. SIGINT at the
    end, as a user stops it; every child is gone afterwards (the launcher waits for them)."""
    deployment = default_deployment().model_copy(update={"router": RouterSpec(port=0)})
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(deployment.model_dump(mode="json", exclude_none=True)))
    env = {**os.environ, "PRFAAS_TRANSFER_SECRET": "bench-schema-secret-0123456789"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "prfaas", "up", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line.startswith("prfaas: serving"):
                url = line.split(" at ")[-1].strip().removesuffix("/v1")
        assert url is not None, f"prfaas up did not come up (exit code {proc.poll()})"
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.e2e
def test_bench_against_live_default_deployment(prfaas_up: str, tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    base = [sys.executable, "-m", "prfaas", "bench", "--endpoint", prfaas_up]
    base += ["--workload", "lognormal:mu=4,sigma=1,min=16,max=300,out=6", "--json"]
    args = [*base, "--num-requests", "8", "--rate", "8", "--records", str(records)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    metrics = validate_metrics(report["metrics"])
    assert (metrics.num_completed, metrics.num_failed) == (8, 0)
    assert metrics.ttft_s.count == 8 and metrics.output_token_throughput_per_s > 0
    assert sum(metrics.paths.values()) == 8  # the router names each request's path
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 8 and all(r["output_tokens"] == 6 for r in rows)
    chat = [*base, "--num-requests", "3", "--api", "chat"]
    done = subprocess.run(chat, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert validate_metrics(json.loads(done.stdout)["metrics"]).num_completed == 3
