"""A model as the serving system sees it: layer groups, cache bytes and prefill FLOPs.

PrfaaS hinges on one fact (paper section 2): in a hybrid model only the full-attention layers keep
KV that grows with the input length l; linear-attention / SSM layers keep a fixed-size recurrent
state and sliding-window layers keep at most a window of KV. So

    S_kv(l) = kv_bytes(l)            full-attention KV, linear in l
            + state_bytes(l)         linear/SSM states (constant) + SWA windows (min(l, W) tokens)

Worked example (Qwen3-235B-A22B, bf16 KV, 94 GQA layers with 4 KV heads of dim 128):
    per token = 94 layers * 2 (K and V) * 4 heads * 128 dims * 2 bytes = 192,512 bytes
    S_kv(32K) = 32,768 * 192,512 B = 6.31 GB = 50.5 Gbit

Prefill FLOPs are split in two because kernels reach different fractions of peak on them:
matmuls of the active parameters (2 FLOPs per weight per token) and each group's token-mixing
term (causal l^2 attention, windowed for SWA, linear in l for linear attention).

Callers: the catalog and the HF-config reader build these; `perf` turns FLOPs into seconds;
`kvcache` (later) derives its pool groups from the same layer groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

#: Chunk length of chunked linear-attention kernels (fla / SGLang use 64). Only used to estimate
#: the intra-chunk FLOPs of linear layers, which are small next to the matmuls.
LINEAR_ATTENTION_CHUNK_TOKENS = 64


def _causal_pairs(length_tokens: int, window_tokens: int | None = None) -> int:
    """Query-key pairs a causal (optionally windowed) attention visits over a prompt.

    Query i (1-based) sees min(i, W) keys: l(l+1)/2 without a window.
    """
    n = length_tokens
    if window_tokens is None or n <= window_tokens:
        return n * (n + 1) // 2
    w = window_tokens
    return w * (w + 1) // 2 + (n - w) * w


@dataclass(frozen=True, slots=True)
class GqaAttention:
    """Full attention with grouped KV heads (MHA and MQA are the edge cases).

    `v_head_dim` differs from `head_dim` in a few models (MiMo-V2-Flash); `gated` adds the
    output gate of Qwen3-Next / Qwen3.5 to the query projection.
    """

    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    gated: bool = False
    kv_dtype_bytes: int = 2

    @property
    def value_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    def kv_bytes_per_token(self) -> int:
        per_layer = self.num_kv_heads * (self.head_dim + self.value_dim) * self.kv_dtype_bytes
        return self.num_layers * per_layer

    def state_bytes(self, length_tokens: int) -> int:
        return 0

    def mixing_flops(self, length_tokens: int) -> int:
        width = self.num_q_heads * (self.head_dim + self.value_dim)
        return 2 * _causal_pairs(length_tokens) * width * self.num_layers

    def params(self, hidden_size: int) -> int:
        q_out = self.num_q_heads * self.head_dim * (2 if self.gated else 1)
        kv_out = self.num_kv_heads * (self.head_dim + self.value_dim)
        o_in = self.num_q_heads * self.value_dim
        return self.num_layers * hidden_size * (q_out + kv_out + o_in)


@dataclass(frozen=True, slots=True)
class SlidingWindowAttention:
    """GQA restricted to the last `window_tokens` keys: its cache is a bounded, request-level
    snapshot (at most W tokens), so it counts as state, not as growing KV."""

    num_layers: int
    window_tokens: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    kv_dtype_bytes: int = 2

    @property
    def value_dim(self) -> int:
        return self.v_head_dim if self.v_head_dim is not None else self.head_dim

    def kv_bytes_per_token(self) -> int:
        return 0

    def window_bytes_per_token(self) -> int:
        per_layer = self.num_kv_heads * (self.head_dim + self.value_dim) * self.kv_dtype_bytes
        return self.num_layers * per_layer

    def state_bytes(self, length_tokens: int) -> int:
        return min(length_tokens, self.window_tokens) * self.window_bytes_per_token()

    def mixing_flops(self, length_tokens: int) -> int:
        width = self.num_q_heads * (self.head_dim + self.value_dim)
        pairs = _causal_pairs(length_tokens, self.window_tokens)
        return 2 * pairs * width * self.num_layers

    def params(self, hidden_size: int) -> int:
        q_out = self.num_q_heads * self.head_dim
        kv_out = self.num_kv_heads * (self.head_dim + self.value_dim)
        o_in = self.num_q_heads * self.value_dim
        return self.num_layers * hidden_size * (q_out + kv_out + o_in)


@dataclass(frozen=True, slots=True)
class MlaAttention:
    """Multi-head latent attention (DeepSeek-V3, Kimi): the cache holds one compressed latent of
    `kv_lora_rank` plus a shared RoPE key of `qk_rope_head_dim` per token and layer.

    Prefill runs in the decompressed (MHA) form, so its FLOPs use the full head dims.
    """

    num_layers: int
    num_q_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0
    kv_dtype_bytes: int = 2

    def kv_bytes_per_token(self) -> int:
        per_layer = (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return self.num_layers * per_layer

    def state_bytes(self, length_tokens: int) -> int:
        return 0

    def mixing_flops(self, length_tokens: int) -> int:
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        width = self.num_q_heads * (qk + self.v_head_dim)
        return 2 * _causal_pairs(length_tokens) * width * self.num_layers

    def params(self, hidden_size: int) -> int:
        h = self.num_q_heads
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q = hidden_size * self.q_lora_rank + self.q_lora_rank * h * qk
        else:
            q = hidden_size * h * qk
        kv_a = hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * h * (self.qk_nope_head_dim + self.v_head_dim)
        o = h * self.v_head_dim * hidden_size
        return self.num_layers * (q + kv_a + kv_b + o)


class LinearKind(StrEnum):
    """Linear-attention / SSM families; they differ in gating, not in cache shape."""

    GATED_DELTANET = "gated_deltanet"
    KDA = "kda"
    LIGHTNING = "lightning"
    MAMBA = "mamba"  # Mamba-1: per channel a d_state vector (key dim = d_state, no q/k conv)
    MAMBA2 = "mamba2"
    SHORT_CONV = "short_conv"  # LFM2: only the conv window (no recurrent state)


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Linear attention or SSM: per layer a recurrent state of num_heads x key_dim x value_dim
    (for Mamba2: heads x d_state x head_dim) plus, when `conv_kernel` > 0, a short causal
    convolution over q, k and v that keeps the last kernel-1 inputs.

    States are usually kept in fp32 (SGLang's default `mamba_ssm_dtype`), conv windows in the
    activation dtype.
    """

    num_layers: int
    kind: LinearKind
    num_heads: int
    num_key_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 0
    state_dtype_bytes: int = 4
    conv_dtype_bytes: int = 2

    @property
    def conv_channels(self) -> int:
        return 2 * self.num_key_heads * self.key_head_dim + self.num_heads * self.value_head_dim

    def recurrent_state_bytes(self) -> int:
        per_layer = self.num_heads * self.key_head_dim * self.value_head_dim
        return self.num_layers * per_layer * self.state_dtype_bytes

    def conv_state_bytes(self) -> int:
        if self.conv_kernel == 0:
            return 0
        per_layer = self.conv_channels * (self.conv_kernel - 1) * self.conv_dtype_bytes
        return self.num_layers * per_layer

    def kv_bytes_per_token(self) -> int:
        return 0

    def state_bytes(self, length_tokens: int) -> int:
        return self.recurrent_state_bytes() + self.conv_state_bytes()

    def mixing_flops(self, length_tokens: int) -> int:
        """Chunked scan: state read and update (4*dk*dv per token and head), causal attention
        inside each chunk (C*(dk+dv)), and the short convolution."""
        dk, dv, c = self.key_head_dim, self.value_head_dim, LINEAR_ATTENTION_CHUNK_TOKENS
        per_token_head = 4 * dk * dv + c * (dk + dv)
        conv = 2 * self.conv_channels * self.conv_kernel
        return length_tokens * self.num_layers * (self.num_heads * per_token_head + conv)

    def params(self, hidden_size: int) -> int:
        """q and k (num_key_heads), v, output gate and out projection (num_heads), two per-head
        scalars (beta, decay) and the conv weights. Low-rank gates (KDA) are counted full-rank:
        an over-estimate of well under 1% of a model."""
        qk = 2 * self.num_key_heads * self.key_head_dim
        v_gate_out = 3 * self.num_heads * self.value_head_dim
        per_layer = hidden_size * (qk + v_gate_out + 2 * self.num_heads)
        per_layer += self.conv_channels * self.conv_kernel
        return self.num_layers * per_layer


MixerGroup = GqaAttention | SlidingWindowAttention | MlaAttention | LinearAttention


@dataclass(frozen=True, slots=True)
class DenseMlp:
    """Gated (SwiGLU) feed-forward: three hidden x intermediate matrices per layer."""

    num_layers: int
    intermediate_size: int

    def params(self, hidden_size: int) -> int:
        return self.num_layers * 3 * hidden_size * self.intermediate_size

    def active_params(self, hidden_size: int) -> int:
        return self.params(hidden_size)


@dataclass(frozen=True, slots=True)
class MoeMlp:
    """Mixture of experts: a router, `num_experts` SwiGLU experts of which `experts_per_token`
    run per token, plus always-on shared experts."""

    num_layers: int
    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0

    def _per_layer(self, hidden_size: int, experts: int) -> int:
        router = hidden_size * self.num_experts
        routed = experts * 3 * hidden_size * self.expert_intermediate_size
        shared = self.num_shared_experts * 3 * hidden_size * self.shared_intermediate_size
        return router + routed + shared

    def params(self, hidden_size: int) -> int:
        return self.num_layers * self._per_layer(hidden_size, self.num_experts)

    def active_params(self, hidden_size: int) -> int:
        return self.num_layers * self._per_layer(hidden_size, self.experts_per_token)


MlpGroup = DenseMlp | MoeMlp


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model's architecture, reduced to what serving cost depends on.

    `mixers` are the token-mixing layer groups (one entry per kind of layer); `mlps` the
    feed-forward groups. Parameter counts are derived, not declared, so a config read from
    Hugging Face and a catalog entry are checked against the model card by the same code.
    """

    name: str
    hidden_size: int
    vocab_size: int
    mixers: tuple[MixerGroup, ...]
    mlps: tuple[MlpGroup, ...]
    tie_word_embeddings: bool = False
    weight_dtype_bytes: int = 2
    #: Decoder layers, when they are not one mixer plus one MLP each (0: they are). Parallel
    #: hybrids (falcon_h1) hold two mixers in one layer; Nemotron-H and Mamba2 have layers
    #: without an MLP, Nemotron-H layers without a mixer.
    num_blocks: int = 0
    #: The Hugging Face config.json it was read from (None: a catalog or model-file model):
    #: where aiconfigurator's timing looks up its shapes (`specs.aic_match`). Provenance, not
    #: architecture, so two specs of one architecture still compare equal.
    config_path: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        mixer_layers = sum(g.num_layers for g in self.mixers)
        mlp_layers = sum(g.num_layers for g in self.mlps)
        if mixer_layers == 0:
            raise ValueError(f"{self.name}: a model needs at least one layer")
        if self.num_blocks == 0 and mixer_layers != mlp_layers:
            raise ValueError(
                f"{self.name}: {mixer_layers} mixer layers but {mlp_layers} MLP layers"
            )
        if self.num_blocks and (mlp_layers > self.num_blocks or mixer_layers > 2 * self.num_blocks):
            raise ValueError(
                f"{self.name}: {mixer_layers} mixer and {mlp_layers} MLP layers "
                f"do not fit in {self.num_blocks} layers"
            )

    @property
    def num_layers(self) -> int:
        return self.num_blocks or sum(g.num_layers for g in self.mixers)

    # --- cache ---------------------------------------------------------------------------

    def kv_bytes_per_token(self) -> int:
        """Bytes of full-attention KV each additional token adds."""
        return sum(g.kv_bytes_per_token() for g in self.mixers)

    def kv_bytes(self, length_tokens: int) -> int:
        """KV that grows with the input: full-attention layers only."""
        return length_tokens * self.kv_bytes_per_token()

    def state_bytes(self, length_tokens: int) -> int:
        """Bounded per-request state: linear/SSM states and SWA windows."""
        return sum(g.state_bytes(length_tokens) for g in self.mixers)

    def cache_bytes(self, length_tokens: int) -> int:
        """S_kv(l) of the paper (Eq. 1): everything a decode instance needs to continue."""
        return self.kv_bytes(length_tokens) + self.state_bytes(length_tokens)

    # --- parameters and compute ----------------------------------------------------------

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def _layer_params(self, *, active: bool) -> int:
        h = self.hidden_size
        mixers = sum(g.params(h) for g in self.mixers)
        mlps = sum(g.active_params(h) if active else g.params(h) for g in self.mlps)
        return mixers + mlps

    @property
    def total_params(self) -> int:
        return self.embedding_params() + self._layer_params(active=False)

    @property
    def active_params(self) -> int:
        return self.embedding_params() + self._layer_params(active=True)

    def weight_bytes(self) -> int:
        return self.total_params * self.weight_dtype_bytes

    def matmul_flops(self, length_tokens: int) -> float:
        """Weight matmuls of a prefill: every active weight, 2 FLOPs per token, plus the logits
        of the last token only (engines skip the LM head for the rest of the prompt)."""
        layers = 2 * length_tokens * self._layer_params(active=True)
        return float(layers + 2 * self.hidden_size * self.vocab_size)

    def mixing_flops(self, length_tokens: int) -> float:
        """Token mixing of a prefill: causal attention, windowed attention, linear scans."""
        return float(sum(g.mixing_flops(length_tokens) for g in self.mixers))

    def prefill_flops(self, length_tokens: int) -> float:
        """FLOPs to prefill `length_tokens` new tokens from an empty cache."""
        return self.matmul_flops(length_tokens) + self.mixing_flops(length_tokens)
