"""Range checks for the command line's numbers, shared by every command.

Each is a typer option callback: it returns the value, or raises `typer.BadParameter`, which
`app.main` prints as one line (`prfaas: error: Invalid value for '--rate': ...`) with exit
status 2. Python's float parser takes `nan`, `inf` and `1e999`, so every float is checked for
being finite as well as for its range: a NaN compares false with every bound and would slip
through a plain `min=` check.
"""

from __future__ import annotations

import math

import typer

#: Trace time scales accepted: above it a replay stretches past any horizon worth simulating.
MAX_TIME_SCALE = 1000.0
#: The shortest slow-loop period accepted (s): shorter ones only spin the event loop.
MIN_REBALANCE_PERIOD_S = 1.0


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def positive(value: float | None) -> float | None:
    """A finite number > 0 (or the option left out)."""
    if value is not None and _finite(value) <= 0:
        raise typer.BadParameter(f"{value:g} is not > 0")
    return value


def non_negative(value: float | None) -> float | None:
    """A finite number >= 0 (or the option left out)."""
    if value is not None and _finite(value) < 0:
        raise typer.BadParameter(f"{value:g} is negative")
    return value


def unit_interval(value: float | None) -> float | None:
    """A finite number in (0, 1] (or the option left out)."""
    if value is not None and not 0 < _finite(value) <= 1:
        raise typer.BadParameter(f"{value:g} is not in (0, 1]")
    return value


def positive_int(value: int | None) -> int | None:
    """A whole number >= 1 (or the option left out)."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"{value} is not >= 1")
    return value


def non_negative_int(value: int | None) -> int | None:
    """A whole number >= 0 (or the option left out)."""
    if value is not None and value < 0:
        raise typer.BadParameter(f"{value} is negative")
    return value


def time_scale(value: float | None) -> float | None:
    """A trace time scale: in (0, MAX_TIME_SCALE]."""
    if value is not None and positive(value) and value > MAX_TIME_SCALE:
        raise typer.BadParameter(f"{value:g} is above {MAX_TIME_SCALE:g}")
    return value


def rebalance_period(value: float | None) -> float | None:
    """A slow-loop period: a finite number of seconds >= MIN_REBALANCE_PERIOD_S."""
    if value is not None and _finite(value) < MIN_REBALANCE_PERIOD_S:
        raise typer.BadParameter(f"{value:g} s is below {MIN_REBALANCE_PERIOD_S:g} s")
    return value


def time_scale_list(option: str, text: str) -> list[float]:
    """`0.7,0.5`: a non-empty comma-separated list of time scales, each in (0, MAX_TIME_SCALE]."""
    hint = f"'{option}'"
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise typer.BadParameter(f"{text!r} is empty: give e.g. 0.7,0.5", param_hint=hint)
    values = []
    for item in items:
        if not item:
            raise typer.BadParameter(f"{text!r} has an empty item", param_hint=hint)
        try:
            value = float(item)
        except ValueError:
            raise typer.BadParameter(f"{item!r} is not a number", param_hint=hint) from None
        if not (math.isfinite(value) and 0 < value <= MAX_TIME_SCALE):
            raise typer.BadParameter(f"{item} is not in (0, {MAX_TIME_SCALE:g}]", param_hint=hint)
        values.append(value)
    return values
