"""`prfaas up` after start-up: restart children that exit, give up when they keep exiting.

Every child (each instance and the router) and the link's delay line (`Launcher.supervised`)
that exits while the deployment runs is restarted with the same command line and environment
after a backoff of `backoff_base_s` x 2^(k-1), at most `backoff_cap_s`, where k counts its
exits within the last `window_s` (config `supervisor`). A child that exits more than
`max_restarts` times within `window_s` exhausts the budget: everything is stopped and
`prfaas up` exits with `EXIT_GAVE_UP`. Each exit is one line (`prfaas: NAME exited (code C);
restarting in D s`), and so is each return, once the restarted child answers (`prfaas: NAME
is back, S s after its restart`).

Meanwhile the router routes around a dead instance (its calls fail or `/state` stops
answering: unhealthy, nothing placed on it, its cache entries dropped) and takes it back when
it answers again with a new `boot_id` (re-registered with a clean cache index, `restarts`
counted in `/admin/state` and `/metrics`). Prefill senders open a fresh transfer session to a
restarted decode instance (the old session's connections were lost with the process).

Exit codes of `prfaas up`: 0 after SIGINT or SIGTERM at any stage (everything stopped), 2
for a bad deployment or a start-up failure (before the "serving" line), `EXIT_GAVE_UP` (3)
when the restart budget ran out. Every exit path stops every child and removes the link's
namespaces.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from prfaas.serve.config.deployment import SupervisorSpec
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.launch.stopping import STOP_SIGNALS

EXIT_STOPPED = 0
EXIT_GAVE_UP = 3
TICK_S = 0.2


@dataclass(slots=True)
class RestartBudget:
    """Per child: exits within the window, and the backoff before the next restart."""

    spec: SupervisorSpec
    _exits: dict[str, deque[float]] = field(default_factory=dict)

    def on_exit(self, name: str, now_s: float) -> float | None:
        """Seconds to wait before restarting `name`, or None: its budget is exhausted."""
        exits = self._exits.setdefault(name, deque())
        exits.append(now_s)
        while exits and now_s - exits[0] > self.spec.window_s:
            exits.popleft()
        if len(exits) > self.spec.max_restarts:
            return None
        return min(self.spec.backoff_cap_s, self.spec.backoff_base_s * 2.0 ** (len(exits) - 1))


@dataclass(slots=True)
class Supervisor:
    launcher: Launcher
    clock: Callable[[], float] = time.monotonic
    _due: dict[str, float] = field(default_factory=dict)  # child -> when to restart it
    _coming_back: dict[str, float] = field(default_factory=dict)  # child -> restarted at
    _stopping: bool = False

    def run(self) -> int:
        """Supervise until SIGINT/SIGTERM (EXIT_STOPPED) or a budget runs out (EXIT_GAVE_UP);
        every child is stopped before returning."""

        def on_signal(signum: int, _: object) -> None:
            self._stopping = True

        previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
        try:
            budget = RestartBudget(self.launcher.deployment.supervisor)
            while not self._stopping:
                if not self.step(budget):
                    return EXIT_GAVE_UP
                time.sleep(TICK_S)
            return EXIT_STOPPED
        finally:
            self.launcher.stop()  # before the handlers go back: a signal now changes nothing
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def step(self, budget: RestartBudget) -> bool:
        """Notice exits, restart what is due; False once a child's budget is exhausted."""
        now_s = self.clock()
        for name, child in self.launcher.supervised.items():
            if name in self._due or child.poll() is None:
                continue
            delay_s = budget.on_exit(name, now_s)
            spec = self.launcher.deployment.supervisor
            if delay_s is None:
                _say(
                    f"{name} exited (code {child.returncode}) more than {spec.max_restarts} "
                    f"times within {spec.window_s:g} s; giving up"
                )
                return False
            _say(f"{name} exited (code {child.returncode}); restarting in {delay_s:g} s")
            self._due[name] = now_s + delay_s
            self._coming_back.pop(name, None)
        for name, due_s in list(self._due.items()):
            if now_s >= due_s and not self._stopping:
                del self._due[name]
                self.launcher.respawn(name)
                self._coming_back[name] = now_s
        self._announce_returns(now_s)
        return True

    def _announce_returns(self, now_s: float) -> None:
        """One line for each restarted child once it answers again."""
        for name, restarted_s in list(self._coming_back.items()):
            if self.launcher.is_serving(name):
                del self._coming_back[name]
                _say(f"{name} is back, {now_s - restarted_s:.1f} s after its restart")


def _say(message: str) -> None:
    print(f"prfaas: {message}", file=sys.stderr, flush=True)
