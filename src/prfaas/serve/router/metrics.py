"""The router's Prometheus metrics, in the style of vLLM's (`vllm:time_to_first_token_seconds`).

One `CollectorRegistry` per router (no global default registry, so tests can run several):

    prfaas:time_to_first_token_seconds{path}       histogram
    prfaas:time_per_output_token_seconds{path}     histogram
    prfaas:e2e_request_latency_seconds{path}       histogram
    prfaas:routing_decisions_total{path,reason}    counter
    prfaas:kv_transfer_bytes_total{path}           counter  KV bytes shipped prefill -> decode
    prfaas:prefix_hit_tokens_total{path}           counter  prompt tokens restored from cache
    prfaas:requests_total{outcome,status}          counter  completed / failed / cancelled /
                                                            rejected (admission, 429),
                                                            with the HTTP status answered
    prfaas:request_failures_total{kind}            counter  retried / request / instance
    prfaas:admission_rejections_total{reason}      counter  429s of admission control
    prfaas:admission_deferrals_total               counter  waits of deferred requests
    prfaas:link_egress_bytes_per_second            gauge    inter-cluster link, measured
    prfaas:link_backlog_bytes                      gauge
    prfaas:link_utilisation                        gauge
    prfaas:instance_running_requests{instance}     gauge
    prfaas:instance_waiting_requests{instance}     gauge
    prfaas:threshold_tokens                        gauge    t
    prfaas:instance_role{instance,role}            gauge    1 for the instance's role now
    prfaas:instance_draining{instance}             gauge    1 while draining for a flip
    prfaas:instance_healthy{instance}              gauge    1 while registered and answering
    prfaas:instance_restarts{instance}             gauge    restarts seen (new boot_id)
    prfaas:instance_cache_resyncs{instance}        gauge    this replica's index resynced
    prfaas:instance_disk_tier_bytes{instance,direction}  gauge  demoted / promoted since start
    prfaas:instance_failed_demotions{instance}     gauge    demoted units the disk refused
    prfaas:role_flips_total{instance,to_role,status}  counter  done / abandoned flips
    prfaas:rebalance_actions_total{action,reason}  counter  slow-loop actions
    prfaas:slow_loop_lease_held / _epoch / _changes_total{change}   the lease
                                                   (registered by `serve.router.lease`)
    prfaas:cache_moves_total{status}               counter  cross-cluster prefix moves
    prfaas:cache_move_joins_total                  counter  requests that joined one in flight
    prfaas:cache_move_bytes_total                  counter  their bytes over the link
    prfaas:cache_move_tokens_total                 counter  prefix tokens made restorable

Beside the Prometheus series, the router keeps its last `MAX_COMPLETED` finished requests
(`completed`: path, reason, TTFT, TPOT, tokens) for the dashboard's percentiles, and logs each
one to the `prfaas.access` logger (the access log: `serve.router.access_log`).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from prfaas.serve.config.deployment import InstanceRole
from prfaas.serve.router.registry import Registry

MAX_COMPLETED = 2000
access_log = logging.getLogger("prfaas.access")


@dataclass(frozen=True, slots=True)
class CompletedRequest:
    """One request the router finished: what the access log and the dashboard show."""

    request_id: str
    path: str
    reason: str
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    e2e_s: float

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (None for a single token)."""
        if self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    def access_line(self) -> str:
        return (
            f"{self.request_id} path={self.path} reason={self.reason} "
            f"tokens={self.prompt_tokens}+{self.completion_tokens} "
            f"ttft_ms={self.ttft_s * 1e3:.1f} e2e_ms={self.e2e_s * 1e3:.1f}"
        )


LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class RouterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.completed: deque[CompletedRequest] = deque(maxlen=MAX_COMPLETED)
        self._add_request_metrics(self.registry)
        self._add_fleet_metrics(self.registry)
        self._add_cache_move_metrics(self.registry)

    def _add_request_metrics(self, r: CollectorRegistry) -> None:
        """Latencies, routing decisions, KV bytes and hits, outcomes, admission."""
        self.ttft = Histogram(
            "prfaas:time_to_first_token_seconds",
            "Time to first token.",
            ["path"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.tpot = Histogram(
            "prfaas:time_per_output_token_seconds",
            "Mean time per output token after the first.",
            ["path"],
            buckets=TPOT_BUCKETS_S,
            registry=r,
        )
        self.e2e = Histogram(
            "prfaas:e2e_request_latency_seconds",
            "End-to-end request latency.",
            ["path"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.decisions = Counter(
            "prfaas:routing_decisions", "Routing decisions.", ["path", "reason"], registry=r
        )
        self.kv_bytes = Counter(
            "prfaas:kv_transfer_bytes", "KV bytes prefill -> decode.", ["path"], registry=r
        )
        self.hit_tokens = Counter(
            "prfaas:prefix_hit_tokens", "Prompt tokens from prefix cache.", ["path"], registry=r
        )
        self.failures = Counter("prfaas:request_failures", "Failed requests.", ["kind"], registry=r)
        self.requests = Counter(
            "prfaas:requests", "Requests by how they ended.", ["outcome", "status"], registry=r
        )
        self.admission_rejections = Counter(
            "prfaas:admission_rejections", "Admission rejections (429).", ["reason"], registry=r
        )
        self.admission_deferrals = Counter(
            "prfaas:admission_deferrals", "Admission deferrals (waits).", registry=r
        )

    def _add_fleet_metrics(self, r: CollectorRegistry) -> None:
        """The link, the instances (load, role, health), the threshold and the slow loop."""
        self.egress = Gauge(
            "prfaas:link_egress_bytes_per_second", "Inter-cluster egress.", registry=r
        )
        self.backlog = Gauge("prfaas:link_backlog_bytes", "Inter-cluster backlog.", registry=r)
        self.utilisation = Gauge("prfaas:link_utilisation", "Egress / capacity.", registry=r)
        self.running = Gauge(
            "prfaas:instance_running_requests", "Running.", ["instance"], registry=r
        )
        self.waiting = Gauge(
            "prfaas:instance_waiting_requests", "Waiting.", ["instance"], registry=r
        )
        self.threshold = Gauge("prfaas:threshold_tokens", "Threshold t.", registry=r)
        self.role = Gauge(
            "prfaas:instance_role", "1 for the role held.", ["instance", "role"], registry=r
        )
        self.draining = Gauge(
            "prfaas:instance_draining", "1 while draining for a flip.", ["instance"], registry=r
        )
        self.healthy = Gauge(
            "prfaas:instance_healthy", "1 while answering.", ["instance"], registry=r
        )
        self.restarts = Gauge(
            "prfaas:instance_restarts", "Restarts seen (new boot_id).", ["instance"], registry=r
        )
        self.cache_resyncs = Gauge(
            "prfaas:instance_cache_resyncs",
            "Times this replica lost the instance's cache events and resynced its index.",
            ["instance"],
            registry=r,
        )
        self.disk_tier_bytes = Gauge(
            "prfaas:instance_disk_tier_bytes",
            "Bytes the instance's pool demoted to its disk tier and promoted back, since start.",
            ["instance", "direction"],
            registry=r,
        )
        self.failed_demotions = Gauge(
            "prfaas:instance_failed_demotions",
            "Demoted units the disk tier could not store (lost, as without a tier).",
            ["instance"],
            registry=r,
        )
        self.role_flips = Counter(
            "prfaas:role_flips",
            "PD role flips.",
            ["instance", "to_role", "status"],
            registry=r,
        )
        self.rebalance_actions = Counter(
            "prfaas:rebalance_actions", "Slow-loop actions.", ["action", "reason"], registry=r
        )

    def _add_cache_move_metrics(self, r: CollectorRegistry) -> None:
        """Cross-cluster prefix moves: outcomes, joins, bytes and tokens."""
        self.cache_moves = Counter(
            "prfaas:cache_moves", "Cross-cluster prefix moves.", ["status"], registry=r
        )
        self.cache_move_joins = Counter(
            "prfaas:cache_move_joins",
            "Requests that joined a move of the same prefix already in flight.",
            registry=r,
        )
        self.cache_move_bytes = Counter(
            "prfaas:cache_move_bytes", "Prefix-move bytes over the link.", registry=r
        )
        self.cache_move_tokens = Counter(
            "prfaas:cache_move_tokens", "Prefix tokens moved and restorable.", registry=r
        )

    def ended(self, outcome: str, status: int) -> None:
        """Count a completions request that ended `completed`, `failed`, `cancelled` or
        `rejected` (admission control's 429)."""
        self.requests.labels(outcome, str(status)).inc()

    def observe(
        self,
        path: str,
        ttft_s: float,
        e2e_s: float,
        num_tokens: int,
        *,
        request_id: str = "",
        reason: str = "",
        prompt_tokens: int = 0,
    ) -> None:
        done = CompletedRequest(request_id, path, reason, prompt_tokens, num_tokens, ttft_s, e2e_s)
        self.completed.append(done)
        access_log.info(done.access_line(), extra={"completed": done})
        self.ttft.labels(path).observe(ttft_s)
        self.e2e.labels(path).observe(e2e_s)
        if done.tpot_s is not None:
            self.tpot.labels(path).observe(done.tpot_s)

    def render(self, registry: Registry, threshold_tokens: int) -> bytes:
        link = registry.link_view()
        self.egress.set(link.egress_bytes_per_s)
        self.backlog.set(link.bytes_waiting)
        self.utilisation.set(link.utilisation)
        self.threshold.set(threshold_tokens)
        for inst in registry.instances.values():
            self.running.labels(inst.name).set(inst.num_running)
            self.waiting.labels(inst.name).set(inst.num_waiting)
            self.draining.labels(inst.name).set(int(inst.is_draining))
            self.healthy.labels(inst.name).set(int(inst.is_healthy))
            self.restarts.labels(inst.name).set(inst.restarts)
            self.cache_resyncs.labels(inst.name).set(inst.resyncs)
            if inst.disk_tier is not None:
                tier = inst.disk_tier
                self.disk_tier_bytes.labels(inst.name, "demoted").set(tier.demoted_bytes)
                self.disk_tier_bytes.labels(inst.name, "promoted").set(tier.promoted_bytes)
                self.failed_demotions.labels(inst.name).set(tier.failed_demotions)
            for role in InstanceRole:
                self.role.labels(inst.name, role.value).set(int(inst.role is role))
        return generate_latest(self.registry)
