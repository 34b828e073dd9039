"""The scarce / plentiful switch (paper section 4), with hysteresis.

The paper names the two prefix rules but not when to use which. We switch on link pressure,
the worst of three signals, each normalised so 1.0 means "at its limit":

    pressure = max(egress / measured bandwidth,
                   backlog drain time / backlog_target_s,
                   retransmitted fraction / retransmit_target)

and enter SCARCE at `enter_scarce` (0.7), leave it at `leave_scarce` (0.5): a link running at
60% neither flaps nor invites cross-cluster cache moves that would push it over. Queue depth at
PrfaaS is the other short-timescale signal; it drives the surge gate of `PrfaasPolicy`, not the
mode, because a long PrfaaS queue says nothing about the link.
"""

from __future__ import annotations

from prfaas.scheduler.config import BandwidthConfig
from prfaas.scheduler.decisions import BandwidthMode
from prfaas.scheduler.view import LinkView


def link_pressure(link: LinkView, config: BandwidthConfig) -> float:
    return max(
        link.utilisation,
        link.backlog_s / config.backlog_target_s,
        link.retransmit_fraction / config.retransmit_target,
    )


class BandwidthModeTracker:
    """Holds the current mode; `update` moves it only across the hysteresis band."""

    def __init__(self, config: BandwidthConfig) -> None:
        self.config = config
        self.mode = BandwidthMode.SCARCE if config.start_mode_scarce else BandwidthMode.PLENTIFUL
        self.num_switches = 0

    def update(self, link: LinkView) -> BandwidthMode:
        pressure = link_pressure(link, self.config)
        if self.mode is BandwidthMode.PLENTIFUL and pressure >= self.config.enter_scarce:
            self.mode = BandwidthMode.SCARCE
            self.num_switches += 1
        elif self.mode is BandwidthMode.SCARCE and pressure <= self.config.leave_scarce:
            self.mode = BandwidthMode.PLENTIFUL
            self.num_switches += 1
        return self.mode
