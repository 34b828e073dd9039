"""The memory of one instance: what its weights and activations leave for the KVCache.

One model, used by the planner (the decode batch's memory bound, Eq. 5) and by the simulator
(each decode instance's KV capacity), so the two agree on every model and chip:

    usable       = MEMORY_FRACTION * gpus * HBM per chip
    activations  = ACTIVATION_TOKENS * (4 * hidden + 2 * active MLP width) * 2 bytes
    KV capacity  = usable - weights - activations

`MEMORY_FRACTION` is the share of HBM a serving engine takes for itself (vLLM's
`gpu_memory_utilization` default, 0.9): the rest is the CUDA context, NCCL buffers and
fragmentation. The activation workspace is sized for one forward pass of `ACTIVATION_TOKENS`
tokens (the prefill chunk, vLLM's default `max_num_batched_tokens`): the residual stream, Q/K/V
and the attention output (4 x hidden) plus the gated MLP's two intermediate activations, in
bf16. Worked example, a Llama-3.1-70B-like dense model on 8 x H200: usable 0.9 x 8 x 141 GB =
1,015 GB, weights 141 GB, activations 8,192 x (4 x 8,192 + 2 x 28,672) x 2 B = 1.5 GB, so the
KV capacity is 873 GB, 2,663 requests of 1K tokens (327,680 B per token).

With attention data parallelism over `dp` ranks (`specs.timing.Parallelism`), each rank holds
its own copy of everything but the routed experts (attention, embeddings, dense and shared
MLPs: the expert MLPs alone are split over the whole instance) and runs its own forward pass:

    weights      = expert weights + dp * the rest
    activations  = dp * the workspace above

so a dense model's DP ranks cost what dp instances of tp GPUs cost (aiconfigurator times them
as such), and an attention-DP split cannot slip weights past the memory model.

When the weights do not fit (`shortfall_bytes` > 0), no KV capacity is defined: the planner
warns, naming the shortfall, and bounds the decode batch by the latency objective alone. The
paper's case study is such a case (1T parameters in fp8 on 8 x H20: 1,018 GB on 768 GB), and it
still plans, as the paper does.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.specs.model import ModelSpec, MoeMlp
from prfaas.specs.perf import PerfProfile

#: Share of HBM the serving engine may use (vLLM's gpu_memory_utilization default).
MEMORY_FRACTION = 0.9
#: Tokens of the largest forward pass the activation workspace holds (the prefill chunk).
ACTIVATION_TOKENS = 8192
#: Bytes per activation value (bf16).
ACTIVATION_DTYPE_BYTES = 2
#: Bytes per GB, for messages (chips are specified in decimal GB).
GB = 1e9


def activation_bytes(model: ModelSpec) -> int:
    """The workspace of one forward pass of `ACTIVATION_TOKENS` tokens (module docstring)."""
    h = model.hidden_size
    mlp_width = max(
        (mlp.active_params(h) // (3 * h * mlp.num_layers) for mlp in model.mlps if mlp.num_layers),
        default=0,
    )
    return ACTIVATION_TOKENS * (4 * h + 2 * mlp_width) * ACTIVATION_DTYPE_BYTES


@dataclass(frozen=True, slots=True)
class InstanceMemory:
    """Where one instance's memory goes, in bytes."""

    usable_bytes: float
    weight_bytes: float
    activation_bytes: float
    where: str  # "8 x h200", for messages

    @property
    def shortfall_bytes(self) -> float:
        """How far weights and activations exceed the usable memory (0 when they fit)."""
        return max(0.0, self.weight_bytes + self.activation_bytes - self.usable_bytes)

    @property
    def kv_capacity_bytes(self) -> float | None:
        """What is left for the KVCache; None when the weights do not fit."""
        if self.shortfall_bytes > 0:
            return None
        return self.usable_bytes - self.weight_bytes - self.activation_bytes

    def fit_warning(self) -> str | None:
        """One line naming the shortfall, or None when the weights fit."""
        if self.shortfall_bytes <= 0:
            return None
        return (
            f"{self.where}: weights {self.weight_bytes / GB:,.0f} GB + activations "
            f"{self.activation_bytes / GB:,.1f} GB do not fit the {self.usable_bytes / GB:,.0f} GB "
            f"usable ({MEMORY_FRACTION:.0%} of HBM): short by {self.shortfall_bytes / GB:,.0f} GB"
        )


def expert_weight_bytes(model: ModelSpec) -> int:
    """Bytes of the MoE layers' weights, which attention-DP ranks share rather than copy (their
    router and shared experts are counted here too: a few percent of a layer)."""
    h = model.hidden_size
    params = sum(mlp.params(h) for mlp in model.mlps if isinstance(mlp, MoeMlp))
    return params * model.weight_dtype_bytes


def instance_memory(profile: PerfProfile, attention_dp_ranks: int = 1) -> InstanceMemory:
    """The memory model of one instance of `profile` (its model on its chips), its attention
    split over `attention_dp_ranks` data-parallel ranks (module docstring)."""
    chip, gpus, model = profile.chip, profile.gpus_per_instance, profile.model
    experts = expert_weight_bytes(model)
    return InstanceMemory(
        usable_bytes=MEMORY_FRACTION * gpus * chip.hbm_bytes,
        weight_bytes=float(experts + attention_dp_ranks * (model.weight_bytes() - experts)),
        activation_bytes=float(attention_dp_ranks * activation_bytes(model)),
        where=f"{gpus} x {chip.name}",
    )
