"""Ctrl-C and SIGTERM while `prfaas up` starts: a stop, recorded, that exits 0.

Until the supervisor takes both signals over (`serve.launch.supervisor`), `stop_on_signals`
makes each raise `StopRequested`, which `prfaas up` catches to stop what it started. Two
details make that stop reliable:

- `StopRequested` subclasses KeyboardInterrupt (every cleanup written for Ctrl-C runs) but is
  not KeyboardInterrupt itself. CPython marks the process to die by SIGINT at exit when a
  KeyboardInterrupt propagates out of code run by `exec` or `eval` of a string (the
  unhandled-interrupt flag of bpo-1054041, python/cpython#11862, set in `run_eval_code_obj`),
  even when a caller further up catches it; every lazy import that makes a dataclass or a
  namedtuple runs such code. `prfaas up` stopped everything, printed so, and then killed
  itself with SIGINT (exit -2, not 0) when the signal came during httpx's first import of
  httpcore (about 1 stop in 10 on a loaded host). The flag is raised for the exact type only.
- The stop is recorded. An exception raised where Python can only print it (a `__del__`, a
  weakref callback) is lost; the start-up loops call `raise_if_requested` so a lost stop
  still stops.
"""

from __future__ import annotations

import signal
from types import FrameType

#: The signals that stop `prfaas up`.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested: list[int] = []  # the signals received since `stop_on_signals`


class StopRequested(KeyboardInterrupt):
    """SIGINT or SIGTERM asked `prfaas up` to stop before it served."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals() -> None:
    """From now on SIGINT and SIGTERM raise `StopRequested` (call from the main thread)."""
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _on_stop_signal)


def raise_if_requested() -> None:
    """Raise `StopRequested` if a stop signal came, whether or not its exception survived."""
    if _requested:
        raise StopRequested(_requested[0])


def _on_stop_signal(signum: int, _: FrameType | None) -> None:
    _requested.append(signum)
    raise StopRequested(signum)
