"""The router's live dashboard in headless Chromium, against a live emulated deployment under
load: the page renders without any external resource, and the figures it shows (routing
reasons, t, roles and queue depths, flips, link capacity, request count and percentiles) are
the router's own (`/admin/state`, `/dashboard/summary`).

Chromium is Debian's `chromium` package; `make test` installs it when missing. Set
PRFAAS_DASHBOARD_SCREENSHOT=docs/img/dashboard.png to keep the screenshot taken under load.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.router.dashboard import History

pytestmark = pytest.mark.e2e

NUM_REQUESTS = 36
SHORT = "What is PrfaaS? "
LONG = "Commodity Ethernet carries the KVCache of hybrid models between datacenters. " * 6


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: `make test` installs Debian's chromium package")
        pytest.skip("chromium is not installed (make test installs it)")
    return found


def run_chromium(url: str, *args: str, tmp_path: Path) -> str:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=4000",
        "--window-size=1400,1000",
        *args,
        url,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


class _Figures(HTMLParser):
    """Every element's `data-k` key and its text (what a reader sees)."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, str] = {}
        self.attrs_of: dict[str, dict[str, str | None]] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        key = dict(attrs).get("data-k")
        if key is not None:
            self.figures[key] = ""
            self.attrs_of[key] = dict(attrs)
        self._open.append(key)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for key in self._open:
            if key is not None:
                self.figures[key] += data


def figures(dom: str) -> _Figures:
    parser = _Figures()
    parser.feed(dom)
    return parser


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    with running(emulated_deployment(time_factor=0.02, num_decode=2), timeout_s=240) as live:
        yield live


def _send(url: str, i: int) -> None:
    prompt = (LONG if i % 3 == 0 else SHORT) + f" request {i}"
    body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 12}
    response = httpx.post(url + "/v1/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text


def _admin(url: str, headers: dict[str, str]) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(url + "/admin/state", headers=headers, timeout=10).json()
    return state


def _wait(predicate: Any, what: str, timeout_s: float = 600.0) -> None:
    """Poll until `predicate()` (the bound only stops a hung run; a loaded host is slow)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _load_flip_and_settle(
    url: str, headers: dict[str, str], screenshot: Path, tmp_path: Path
) -> None:
    """A mixed load with a screenshot half way, then a role flip, then idle queues."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        sent = [pool.submit(_send, url, i) for i in range(NUM_REQUESTS)]
        _wait(lambda: sum(f.done() for f in sent) >= NUM_REQUESTS // 2, "half the load")
        run_chromium(url + "/dashboard", f"--screenshot={screenshot}", tmp_path=tmp_path)
        for future in sent:
            future.result()
    flip = httpx.post(
        url + "/admin/instances/pdd-1/role",
        json={"role": "pd-prefill"},
        headers=headers,
        timeout=10,
    )
    assert flip.status_code == 202, flip.text
    _wait(
        lambda: all(f["status"] != "draining" for f in _admin(url, headers)["rebalance"]["flips"]),
        "the flip",
    )
    _wait(
        lambda: all(i["running"] == i["waiting"] == 0 for i in _admin(url, headers)["instances"]),
        "idle queues",
    )
    time.sleep(1.0)  # one more history sample at rest


def test_dashboard_under_load_shows_the_routers_own_figures(
    launcher: Launcher, tmp_path: Path
) -> None:
    url = launcher.url
    page = httpx.get(url + "/dashboard", timeout=10).text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from elsewhere

    stop = threading.Event()

    def watch() -> None:  # a dashboard kept open: the summary read every half second
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(url + "/dashboard/summary", timeout=10)
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    screenshot = tmp_path / "dashboard.png"
    try:
        _load_flip_and_settle(url, launcher.admin_headers, screenshot, tmp_path)
    finally:
        stop.set()
        watcher.join()
    assert screenshot.stat().st_size > 10_000
    if target := os.environ.get("PRFAAS_DASHBOARD_SCREENSHOT"):
        shutil.copyfile(screenshot, target)

    dom = run_chromium(url + "/dashboard", "--dump-dom", tmp_path=tmp_path)
    assert 'data-state="ready"' in dom
    state = _admin(url, launcher.admin_headers)
    summary = httpx.get(url + "/dashboard/summary", timeout=10).json()
    _check_figures(figures(dom), state, summary)


def _check_figures(parsed: _Figures, state: dict[str, Any], summary: dict[str, Any]) -> None:
    """What the page shows against what the router says (both read at rest)."""
    shown = parsed.figures
    reasons = {k.removeprefix("reason:"): int(v) for k, v in shown.items() if "reason:" in k}
    assert reasons == state["reasons"]
    assert sum(reasons.values()) == NUM_REQUESTS
    paths = {
        k.removeprefix("path:"): int(str(parsed.attrs_of[k]["data-n"]))
        for k in shown
        if k.startswith("path:")
    }
    assert set(paths) == {"prfaas", "pd-p"}  # the mix took both paths
    assert sum(paths.values()) == NUM_REQUESTS
    assert int(shown["threshold_tokens"]) == state["threshold_tokens"]
    for inst in state["instances"]:
        name = inst["name"]
        assert shown[f"instance:{name}:role"] == inst["role"]
        assert int(shown[f"instance:{name}:running"]) == inst["running"]
        assert int(shown[f"instance:{name}:waiting"]) == inst["waiting"]
        assert int(shown[f"instance:{name}:inflight"]) == inst["inflight"]
    assert shown["instance:pdd-1:role"] == "pd-prefill"  # the flip, as /admin/state has it
    assert int(shown["flips:count"]) == len(state["rebalance"]["flips"]) == 1
    capacity_mbps = state["link"]["capacity_bytes_per_s"] * 8 / 1e6
    assert shown["link:capacity_mbps"] == f"{capacity_mbps:.0f}"
    assert int(shown["latency:all:count"]) == NUM_REQUESTS
    for path, latency in summary["latency"].items():
        for q in ("p50", "p90", "p99"):
            # the page rounds as JavaScript's toFixed (a tie such as 335.25 goes up, where
            # Python's format goes to even): equal to within half the last digit shown
            ttft = float(shown[f"latency:{path}:ttft_ms:{q}"])
            tpot = float(shown[f"latency:{path}:tpot_ms:{q}"])
            assert abs(ttft - latency["ttft_ms"][q]) <= 0.05 + 1e-9
            assert abs(tpot - latency["tpot_ms"][q]) <= 0.005 + 1e-9
    assert len(summary["history"]) >= 2


def test_history_marks_the_first_sample_after_a_time_nobody_read_it() -> None:
    """The charts restart their line there (`after_gap`) instead of drawing one across time
    with no samples (before the page opened)."""
    history = History()
    link = {"utilisation": 0.0, "egress_bytes_per_s": 0.0, "bytes_waiting": 0.0}
    for now_s in (5.0, 5.5, 6.0, 7.0, 600.0, 601.0):
        history.sample(now_s, 128, link)
    assert [(h["t_s"], h["after_gap"]) for h in history.samples] == [
        (5.0, False),
        (6.0, False),
        (7.0, False),
        (600.0, True),
        (601.0, False),
    ]
