"""The shipped Grafana dashboard queries only metrics the router exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prfaas.serve.router.metrics import RouterMetrics

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "prfaas-router.json"
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum")


def test_every_panel_queries_an_exported_metric() -> None:
    board = json.loads(DASHBOARD.read_text())
    families = {m.name for m in RouterMetrics().registry.collect()}
    exported = {name + suffix for name in families for suffix in SUFFIXES}
    queried = set()
    for panel in board["panels"]:
        assert panel["title"] and panel["targets"]
        for target in panel["targets"]:
            names = re.findall(r"prfaas:[a-z0-9_]+", target["expr"])
            assert names, target["expr"]
            queried.update(names)
    assert queried <= exported, queried - exported
    # every family the router exports is on the board
    assert families <= {re.sub(r"_(total|bucket)$", "", q) for q in queried}
