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

**The engine's start-up rule** (`StartupRule`, issue 30). The above is vLLM's, the default
rule (the roofline and measured sources, and what reproduces the paper's tables). Where the
timing source names an engine (`--timing aic --engine E`, `startup_rule`), the memory is what
that engine reserves at start-up, so the KV budget and the fit are what it would give:

    sglang   static pool = mem_fraction_static x gpus x HBM (weights + KV), the fraction derived
             per GPU from its memory and TP size (`sglang_mem_fraction_static`); activations,
             CUDA graphs and DP-attention padding live in the reserved rest, so
             KV = static pool - weights
    vllm     as above with gpu_memory_utilization 0.92 (the default since vLLM 0.22; the data
             aiconfigurator times is vLLM 0.24): KV = 0.92 x gpus x HBM - weights - activations
             (the profiling run's peak, our workspace estimate)
    trtllm   KV = free_gpu_memory_fraction 0.9 x (gpus x HBM - weights - activations): the
             fraction is of the memory left after weights and activations

Worked example, SGLang on B200 (180 GB = 171,661 MiB, the >= 160 GiB tier: chunked prefill
16,384, CUDA-graph batch 512) for a TP8 instance: reserved 512 + 1.5 x 16,384 + 2 x 512 +
8 / 8 x 1,024 = 27,136 MiB, mem_fraction_static = 0.842; with attention DP8 the padding adds
512 x 8 x (3 + 1.5) = 18,432 MiB: 0.735.

When the weights do not fit (`shortfall_bytes` > 0), no KV capacity is defined: the planner
warns, naming the shortfall, and bounds the decode batch by the latency objective alone. The
paper's case study is such a case (1T parameters in fp8 on 8 x H20: 1,018 GB on 768 GB), and it
still plans, as the paper does.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.specs.model import ModelSpec, MoeMlp
from prfaas.specs.perf import PerfProfile
from prfaas.specs.timing import AicEngine, TimingChoice, TimingSource

#: Share of HBM the serving engine may use (vLLM's gpu_memory_utilization default).
MEMORY_FRACTION = 0.9
#: Tokens of the largest forward pass the activation workspace holds (the prefill chunk).
ACTIVATION_TOKENS = 8192
#: Bytes per activation value (bf16).
ACTIVATION_DTYPE_BYTES = 2
#: Bytes per GB, for messages (chips are specified in decimal GB).
GB = 1e9
#: vLLM's gpu_memory_utilization default since 0.22 (vllm/config/cache.py, CacheConfig).
VLLM_GPU_MEMORY_UTILIZATION = 0.92
#: TensorRT-LLM's KvCacheConfig.free_gpu_memory_fraction default: the KV share of free memory.
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class StartupRule:
    """How a serving engine divides an instance's HBM at start-up (module docstring):
    `engine` None is the default rule (a `fraction` of HBM for weights, activations and KV);
    vLLM takes `fraction` of HBM the same way, TensorRT-LLM gives the KV `fraction` of what
    weights and activations leave, and SGLang derives its fraction per GPU."""

    engine: AicEngine | None = None
    fraction: float = MEMORY_FRACTION

    def describe(self, fraction: float) -> str:
        """The rule in a warning's words, with the fraction it applied."""
        if self.engine is AicEngine.SGLANG:
            return f"SGLang mem_fraction_static {fraction:.3f}"
        if self.engine is AicEngine.TRTLLM:
            return f"TensorRT-LLM, KV {fraction:.0%} of what weights and activations leave"
        return f"{fraction:.0%} of HBM"


#: The rule of the sources that name no engine (roofline, measured): vLLM's 0.9 of HBM.
DEFAULT_RULE = StartupRule()


def startup_rule(choice: TimingChoice) -> StartupRule:
    """The rule of the engine the timing choice names: aiconfigurator's engine, else the
    default rule (the roofline and measured profiles name no engine)."""
    if choice.source is not TimingSource.AIC:
        return DEFAULT_RULE
    fractions = {
        AicEngine.SGLANG: MEMORY_FRACTION,  # unused: SGLang derives its own per GPU
        AicEngine.VLLM: VLLM_GPU_MEMORY_UTILIZATION,
        AicEngine.TRTLLM: TRTLLM_FREE_GPU_MEMORY_FRACTION,
    }
    return StartupRule(choice.engine, fractions[choice.engine])


def sglang_mem_fraction_static(
    hbm_bytes_per_gpu: float, tp_size: int, dp_attention_size: int = 1
) -> float:
    """SGLang's default `mem_fraction_static` on one GPU, as `ServerArgs.
    _handle_gpu_memory_settings` derives it at start-up (sglang python/sglang/srt/server_args.py,
    0.5.x; aiconfigurator-core 0.12.0 carries the same rule as
    `derive_sglang_mem_fraction_static`, citing 0.5.16). By the GPU's memory in MiB it picks
    the prefill chunk and the largest CUDA-graph batch, and reserves, in MiB,

        512 + 1.5 x chunk + 2 x graph batch + tp_size / 8 x 1,024
        + graph batch x dp x 3 (+ x 1.5 more past a graph batch of 300) with DP attention

    at least 10 GiB on GPUs over 60 GiB; the fraction is (memory - reserved) / memory, to 3
    places. `tp_size` is SGLang's `--tp`: every GPU of the instance, attention DP included
    (aiconfigurator passes its attention TP there, which reserves less with attention DP).
    Left out: pipeline parallelism (1 here), speculative decoding and piecewise CUDA graphs
    (off by default)."""
    mib = hbm_bytes_per_gpu / MIB
    if mib < 20 * 1024:
        chunk, graph_bs = 2048, 8
    elif mib < 35 * 1024:
        chunk, graph_bs = 2048, (24 if tp_size < 4 else 80)
    elif mib < 60 * 1024:
        chunk, graph_bs = 4096, (32 if tp_size < 4 else 160)
    elif mib < 160 * 1024:  # H100 / A100-80G and H20 / H200: the same two tiers' values
        chunk, graph_bs = 8192, (256 if tp_size < 4 else 512)
    else:
        chunk, graph_bs = 16384, 512
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graph_bs + tp_size / 8 * 1024
    if dp_attention_size > 1:
        reserved += graph_bs * dp_attention_size * (3 + (1.5 if graph_bs > 300 else 0))
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


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

    usable_bytes: float  # what weights, activations and KV may take together
    weight_bytes: float
    activation_bytes: float  # 0 where the engine reserves them outside the usable (SGLang)
    where: str  # "8 x h200", for messages
    rule: str = f"{MEMORY_FRACTION:.0%} of HBM"  # how usable was sized, for messages
    kv_share: float = 1.0  # the KV's share of what is left (TensorRT-LLM's fraction)

    @property
    def shortfall_bytes(self) -> float:
        """How far weights and activations exceed the usable memory (0 when they fit)."""
        return max(0.0, self.weight_bytes + self.activation_bytes - self.usable_bytes)

    @property
    def kv_capacity_bytes(self) -> float | None:
        """What is left for the KVCache; None when the weights do not fit."""
        if self.shortfall_bytes > 0:
            return None
        return self.kv_share * (self.usable_bytes - self.weight_bytes - self.activation_bytes)

    def fit_warning(self) -> str | None:
        """One line naming the shortfall, or None when the weights fit."""
        if self.shortfall_bytes <= 0:
            return None
        return (
            f"{self.where}: weights {self.weight_bytes / GB:,.0f} GB + activations "
            f"{self.activation_bytes / GB:,.1f} GB do not fit the {self.usable_bytes / GB:,.0f} GB "
            f"usable ({self.rule}): short by {self.shortfall_bytes / GB:,.0f} GB"
        )


def expert_weight_bytes(model: ModelSpec) -> int:
    """Bytes of the MoE layers' weights, which attention-DP ranks share rather than copy (their
    router and shared experts are counted here too: a few percent of a layer)."""
    h = model.hidden_size
    params = sum(mlp.params(h) for mlp in model.mlps if isinstance(mlp, MoeMlp))
    return params * model.weight_dtype_bytes


def instance_memory(
    profile: PerfProfile, attention_dp_ranks: int = 1, rule: StartupRule = DEFAULT_RULE
) -> InstanceMemory:
    """The memory model of one instance of `profile` (its model on its chips), its attention
    split over `attention_dp_ranks` data-parallel ranks, as the engine of `rule` sizes it at
    start-up (module docstring)."""
    chip, gpus, model = profile.chip, profile.gpus_per_instance, profile.model
    experts = expert_weight_bytes(model)
    hbm = gpus * chip.hbm_bytes
    weights = float(experts + attention_dp_ranks * (model.weight_bytes() - experts))
    activations = float(attention_dp_ranks * activation_bytes(model))
    where = f"{gpus} x {chip.name}"
    if rule.engine is AicEngine.SGLANG:
        # With experts, DP ranks are SGLang's DP attention inside one server of --tp = all
        # GPUs; a dense model's DP ranks are --dp replicas of --tp = gpus / dp each.
        has_experts = experts > 0
        tp_size = gpus if has_experts else gpus // attention_dp_ranks
        dp_attention = attention_dp_ranks if has_experts else 1
        fraction = sglang_mem_fraction_static(chip.hbm_bytes, tp_size, dp_attention)
        return InstanceMemory(fraction * hbm, weights, 0.0, where, rule.describe(fraction))
    if rule.engine is AicEngine.TRTLLM:
        described = rule.describe(rule.fraction)
        return InstanceMemory(hbm, weights, activations, where, described, rule.fraction)
    return InstanceMemory(
        rule.fraction * hbm, weights, activations, where, rule.describe(rule.fraction)
    )
