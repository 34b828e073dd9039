"""`prfaas up` tells what it does: a line per instance as it comes up, an access-log line per
request (path, reason, tokens, TTFT; none with --quiet), and a summary when it stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from serve_helpers import emulated_deployment

pytestmark = pytest.mark.e2e

ACCESS_LINE = re.compile(
    r"^\S+Z cmpl-\w+ path=(prfaas|pd-p) reason=\S+ tokens=\d+\+\d+ ttft_ms=[\d.]+ e2e_ms=[\d.]+$"
)


def _deployment_file(tmp_path: Path) -> Path:
    deployment = emulated_deployment(time_factor=0.01)
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(deployment.model_dump(mode="json")))
    return path


def _run_up(tmp_path: Path, *flags: str) -> tuple[list[str], str]:
    env = {**os.environ, "PRFAAS_TRANSFER_SECRET": "e2e-test-secret-0123456789"}
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with out_path.open("w") as out, err_path.open("w") as err:
        argv = [sys.executable, "-m", "prfaas", "up", str(_deployment_file(tmp_path)), *flags]
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        try:
            deadline = time.monotonic() + 600  # start-up on a loaded host
            while "serving" not in out_path.read_text():
                assert proc.poll() is None, err_path.read_text()
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.2)
            url = re.search(r"at (http://\S+)/v1", out_path.read_text())
            assert url is not None
            for prompt in ("hi", "PrfaaS offloads long prefill. " * 12, "hello"):
                body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4}
                response = httpx.post(url.group(1) + "/v1/completions", json=body, timeout=600)
                assert response.status_code == 200, response.text
            time.sleep(0.5)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
    return out_path.read_text().splitlines(), err_path.read_text()


def test_up_logs_start_up_requests_and_a_summary(tmp_path: Path) -> None:
    out, err = _run_up(tmp_path)
    for name in ("prfaas-0", "pdp-0", "pdd-0"):
        assert re.search(rf"{name} \([a-z-]+, emulated\) up after [\d.]+ s", err), err
    assert "router ready after" in err
    access = [line for line in out if " path=" in line]
    assert len(access) == 3 and all(ACCESS_LINE.match(line) for line in access), out
    assert {line.split(" path=")[1].split()[0] for line in access} == {"prfaas", "pd-p"}
    assert re.search(r"served 3 requests: pd-p 2 \(mean TTFT \d+ ms\), prfaas 1", err), err
    assert "every process stopped" in err


def test_up_quiet_drops_the_access_log_not_the_summary(tmp_path: Path) -> None:
    out, err = _run_up(tmp_path, "--quiet")
    assert not [line for line in out if " path=" in line]
    assert "served 3 requests" in err
