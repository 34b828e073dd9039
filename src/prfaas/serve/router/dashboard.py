"""The router's live dashboard: `GET /dashboard` (one self-refreshing HTML page, its script and
style inline, nothing fetched from elsewhere) and `GET /dashboard/summary` (the JSON it draws).

The summary is built from the router's own state only, the same objects `/admin/state` and
`/metrics` read: routing counts per path and reason (the scheduler's), TTFT/TPOT percentiles
over the last `MAX_COMPLETED` finished requests (`RouterMetrics.completed`), queue depths per
instance (registry), the inter-cluster link's utilisation, egress and backlog (the PrfaaS
senders' telemetry), the threshold t, role flips and slow-loop actions (`SlowLoop`), and the
cross-cluster cache moves (their Prometheus counters and the recent decisions). A history of
t and of the link (one sample a second at most, `MAX_HISTORY` kept) is taken when the summary
is read, so it covers the time a dashboard was open; a sample taken after a time nobody read
it (over `GAP_S`) says so (`after_gap`), and the charts start a new line there instead of
drawing one across time with no samples.

Access: both routes are read-only and unauthenticated, like `/metrics`; the summary carries
aggregates and instance names, never prompts, tokens or instance addresses, and no route here
changes anything. The admin routes (`/admin/...`) are the ones that act, and they are the
ones to protect.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from prfaas.metrics import Distribution
from prfaas.serve.router.rebalance import admin_view

if TYPE_CHECKING:
    from prfaas.serve.router.flow import RouterRuntime

MAX_HISTORY = 900
HISTORY_PERIOD_S = 1.0
GAP_S = 3 * HISTORY_PERIOD_S  # samples further apart: no dashboard was open between them
MOVE_STATUSES = ("done", "nothing-moved", "failed")


@dataclass(slots=True)
class History:
    """Samples of t and the link, taken when the summary is read (at most one a period)."""

    samples: deque[dict[str, float | bool]] = field(
        default_factory=lambda: deque(maxlen=MAX_HISTORY)
    )
    last_s: float | None = None

    def sample(self, now_s: float, threshold_tokens: int, link: dict[str, float]) -> None:
        if self.last_s is not None and now_s - self.last_s < HISTORY_PERIOD_S:
            return
        after_gap = self.last_s is not None and now_s - self.last_s > GAP_S
        self.last_s = now_s
        self.samples.append(
            {
                "t_s": round(now_s, 3),
                "after_gap": after_gap,
                "threshold_tokens": threshold_tokens,
                "utilisation": link["utilisation"],
                "egress_bytes_per_s": link["egress_bytes_per_s"],
                "bytes_waiting": link["bytes_waiting"],
            }
        )


def _ms(dist: Distribution) -> dict[str, float | int | None]:
    def scaled(value: float | None) -> float | None:
        return None if value is None else round(value * 1e3, 3)

    return {
        "count": dist.count,
        "mean": scaled(dist.mean),
        "p50": scaled(dist.median),
        "p90": scaled(dist.p90),
        "p99": scaled(dist.p99),
    }


def _latency(rt: RouterRuntime) -> dict[str, dict[str, Any]]:
    done = list(rt.metrics.completed)
    groups = {"all": done}
    for path in sorted({d.path for d in done}):
        groups[path] = [d for d in done if d.path == path]
    return {
        name: {
            "ttft_ms": _ms(Distribution.of([d.ttft_s for d in items])),
            "tpot_ms": _ms(Distribution.of([d.tpot_s for d in items if d.tpot_s is not None])),
        }
        for name, items in groups.items()
    }


def _cache_moves(rt: RouterRuntime) -> dict[str, Any]:
    registry = rt.metrics.registry
    counts = {
        status: int(registry.get_sample_value("prfaas:cache_moves_total", {"status": status}) or 0)
        for status in MOVE_STATUSES
    }
    recent = [
        {"t_s": r["t_s"], "request_id": r["request_id"], **r["move"]}
        for r in rt.recent
        if r.get("move") and not r["move"].get("joined")  # each move once
    ]
    moved_bytes = registry.get_sample_value("prfaas:cache_move_bytes_total") or 0
    return {"counts": counts, "bytes": int(moved_bytes), "recent": recent[-20:]}


def summary(rt: RouterRuntime, history: History) -> dict[str, Any]:
    """Everything the dashboard shows, from the router's own state."""
    link_view = rt.registry.link_view()
    link = {
        "capacity_bytes_per_s": link_view.capacity_bytes_per_s,
        "egress_bytes_per_s": link_view.egress_bytes_per_s,
        "bytes_waiting": link_view.bytes_waiting,
        "utilisation": link_view.utilisation,
        "rtt_s": link_view.rtt_s,
    }
    now_s = rt.now_s()
    threshold = rt.threshold_tokens
    history.sample(now_s, threshold, link)
    reasons = dict(rt.scheduler.reasons) if rt.registry.healthy() else {}
    paths: Counter[str] = Counter()
    for key, count in reasons.items():
        paths[key.split(":", 1)[0]] += count
    slow = admin_view(rt.slow_loop)
    return {
        "schema": "prfaas.dashboard/1",
        "t_s": round(now_s, 3),
        "wall_time": time.time(),
        "model": rt.deployment.model_name,
        "threshold_tokens": threshold,
        "paths": dict(paths),
        "reasons": reasons,
        "latency": _latency(rt),
        "instances": [
            {
                "name": i.name,
                "cluster": i.spec.cluster,
                "role": i.role.value,
                "healthy": i.is_healthy,
                "draining": i.is_draining,
                "running": i.num_running,
                "waiting": i.num_waiting,
                "inflight": i.inflight,
            }
            for i in rt.registry.instances.values()
        ],
        "link": {**link, "up": not rt.registry.links_down()},
        "history": list(history.samples),
        "flips": slow["flips"],
        "rebalance_actions": slow["recent_actions"],
        "rebalance_enabled": slow["enabled"],
        "cache_moves": _cache_moves(rt),
    }


def _page() -> str:
    return (resources.files("prfaas.serve.router") / "data" / "dashboard.html").read_text()


def register_dashboard(app: FastAPI, runtime: Callable[[], RouterRuntime]) -> None:
    """Mount `/dashboard` and `/dashboard/summary` on the router's app."""
    history = History()
    page = _page()

    @app.get("/dashboard", response_class=HTMLResponse)
    async def dashboard() -> HTMLResponse:
        """The live dashboard (HTML; refreshes itself from /dashboard/summary)."""
        return HTMLResponse(page)

    @app.get("/dashboard/summary")
    async def dashboard_summary() -> dict[str, Any]:
        """Read-only aggregates of the router's state (the dashboard's data)."""
        return summary(runtime(), history)
