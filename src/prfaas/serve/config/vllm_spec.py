"""The deployment file's `vllm:` block: how `backend: vllm` instances run their engine.

    model: /models/my-llama            # a local checkpoint directory (never downloaded)
    vllm: {kv_cache_gib: 1, max_model_len: 4096, dtype: null, cpu_threads_bind: nobind,
           extra_args: []}
    instances:
      - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: vllm}

Pure data (pydantic): `serve.config.deployment` embeds it; `serve.backends.vllm.backend` reads it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class VllmSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_gib: int = Field(default=1, gt=0)  # VLLM_CPU_KVCACHE_SPACE per instance
    max_model_len: int = Field(default=4096, gt=0)
    dtype: str | None = None  # `--dtype`; None: the checkpoint's
    start_timeout_s: float = Field(default=1800.0, gt=0)  # 2 shared cores: minutes
    # VLLM_CPU_OMP_THREADS_BIND: vLLM's "auto" pins every engine on a host to the same
    # cores (on 2 cores: all of them to core 0, beside their spinning schedulers);
    # "nobind" lets the OS place them. "auto" or a range ("0-15") suits a dedicated host.
    cpu_threads_bind: str = Field(default="nobind", min_length=1)
    extra_args: tuple[str, ...] = ()  # more `vllm serve` flags, passed as they are
    # where each `vllm serve` writes its output (`<log_dir>/<instance>.log`); null: `prfaas up`
    # makes one per run (and says where), else the system temp dir (`backends.vllm.child_log`)
    log_dir: str | None = None
