"""Measured prefill time on a real GPU node, to settle where the roofline, aiconfigurator's data
and the paper's Table 3 disagree (docs/benchmarks.md, "prfaas beside aiconfigurator"). Prints
JSON in the layout of `aic_side_by_side.py`'s `prefill` rows, plus `measured_s`.

    python benchmarks/gpu_prefill_measure.py --model /models/Llama-3.1-70B --catalog llama-3.1-70b \
        --tp 8 [--ep] [--lengths 1024,8192,32768,131072] [--repeats 5] [--save out/gpu.json]

Not run yet: it needs a node with the chips (8 x H200 for the comparison as published) and the
checkpoint on local disk, and runs in a venv with vLLM for CUDA (not this repository's CPU
venvs). One request at a time, `max_tokens=1`, prefix caching off, random token ids of the
exact length; the first run of each length is a warm-up and the median of `--repeats` is
reported, end to end as vLLM's engine sees it (scheduling, the forward pass, sampling), which
is what the roofline's `prefill_overhead_s` and the paper's Table 3 include and what
aiconfigurator's per-kernel sum leaves out.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from vllm import LLM, SamplingParams  # the GPU node's vLLM, not a dependency of prfaas

    lengths = [int(x) for x in args.lengths.split(",")]
    llm = LLM(
        model=args.model,
        tensor_parallel_size=args.tp,
        enable_expert_parallel=args.ep,
        enable_prefix_caching=False,
        max_model_len=max(lengths) + 16,
        max_num_batched_tokens=max(lengths) + 16,
    )
    params = SamplingParams(max_tokens=1, temperature=0.0)
    vocab = llm.get_tokenizer().vocab_size
    rng = random.Random(0)
    rows = []
    for length in lengths:
        seconds = []
        for _ in range(args.repeats + 1):
            prompt = {"prompt_token_ids": [rng.randrange(vocab) for _ in range(length)]}
            started = time.perf_counter()
            llm.generate([prompt], params, use_tqdm=False)
            seconds.append(time.perf_counter() - started)
        rows.append({
            "model": args.catalog, "length_tokens": length,
            "measured_s": statistics.median(seconds[1:]), "runs_s": seconds[1:],
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local checkpoint directory")
    parser.add_argument("--catalog", required=True, help="prfaas catalog name of the model")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--ep", action="store_true", help="expert parallel MoE layers")
    parser.add_argument("--lengths", default="1024,8192,32768,131072")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--save", default=None)
    args = parser.parse_args()
    result = {"benchmark": "gpu_prefill_measure", "tp": args.tp, "ep": args.ep}
    result["prefill"] = measure(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.save:
        with open(args.save, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
