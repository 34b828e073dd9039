"""`benchmarks/aic_tables.py`: the docs' aiconfigurator tables rendered from one run's JSON
(a hand-made result with one row per part, in the shape `aic_side_by_side.py --save` writes)."""

from __future__ import annotations

from typing import Any

from aic_tables import render

SOURCE = "aiconfigurator 0.12.0 (sglang 0.5.14 data, h200_sxm, {})"


def _plan(per_gpu: float, pd_p: str, pd_d: str) -> dict[str, Any]:
    return {
        "req_per_s_per_gpu": per_gpu, "n_p": 6, "n_d": 2, "bottleneck": "pd-p",
        "decode_batch": 96, "decode_step_ms": 32.94, "pd_p_shape": pd_p, "pd_d_shape": pd_d,
        "pd_p_timing": SOURCE.format(pd_p), "pd_d_timing": SOURCE.format(pd_d),
    }  # fmt: skip


RESULT: dict[str, Any] = {
    "aiconfigurator_core": "0.12.0", "engine": "sglang", "data_versions": {"sglang": "0.5.14"},
    "git_sha": "abc1234", "wall_s": 700.4, "host": {"cpus": 2},
    "prefill": [{"model": "llama-3.1-70b", "length_tokens": 8192, "roofline_s": 1.1614,
                 "aic_sglang_s": 0.335, "aic_vllm_s": None, "aic_trtllm_s": 0.339,
                 "paper_table3_s": None}],
    "homogeneous_vs_disagg": [{
        "model": "llama-3.1-70b", "family": "dense", "chip": "h200",
        "slo": {"ttft_ms": 5000.0, "tpot_ms": 33.0},
        "prfaas_homogeneous": _plan(0.373, "tp2 dp4", "tp8"),
        "prfaas_one_pd_shape": _plan(0.341, "tp2 dp2", "tp2 dp2"),
        "prfaas_engine_rule": _plan(0.35, "tp4", "tp4"),
        "prfaas_under_rules": _plan(0.3, "tp4", "tp4"),
        "aiconfigurator": {
            "agg": {"req_per_s_per_gpu": 0.262},
            "disagg": {
                "req_per_s_per_gpu": 0.275,
                "row": {"(p)workers": 3, "(d)workers": 1, "(d)bs": 60},
                "parallel": {"(p)parallel": "tp4pp1dp1etp1ep1", "(d)parallel": "tp4pp1dp1etp1ep1"},
            },
        },
        "decomposition": {
            "values": {"aic": 0.275, "shape": 0.373},
            "factors": {"fixed": 1.175, "timing": 0.997, "split": 1.0, "pick": 1.049,
                        "batch": 1.0, "queue": 0.995, "shape": 1.108},
            "aic_decode_batch": 60, "aic_rule_batch": 96, "ours_decode": {"batch": 115},
        },
        "ours_as_aic_evaluates": {"error": "RuntimeError: OOM: the model does not fit"},
    }],
    "prfaas_across_clusters": [{
        "model": "qwen3-235b", "price": 144.0, "aic_isl_tokens": 27486,
        "prfaas_pd": {"req_per_s": 4.14, "threshold_tokens": 36700, "n_prfaas": 2, "n_p": 2,
                      "n_d": 5, "bottleneck": "pd-p", "egress_gbps": 99.94,
                      "prfaas_timing": SOURCE.format("tp8 ep8"), "pd_p_timing": "roofline",
                      "pd_d_timing": SOURCE.format("tp8")},
        "aiconfigurator_single_cluster_at_equal_price": {"h200": {
            "gpus": 72, "agg": {"req_per_s_per_gpu": 0.0630}, "disagg": {"req_per_s_per_gpu": 0.05},
        }},
    }],
}  # fmt: skip


def test_every_table_of_the_run_is_rendered_from_its_json() -> None:
    lines = render(RESULT).splitlines()
    assert "| llama-3.1-70b | 8K | 1.161 | 0.335 | - | 0.339 | - |" in lines
    assert (
        "| llama-3.1-70b (dense) | h200 | 5 s / 33 ms | 0.373 (6/2, tp2 dp4 / tp8, pd-p; BS 96 at "
        "32.9 ms) | 0.341 (tp2 dp2 / tp2 dp2) | 0.275 (tp4pp1dp1etp1ep1 x3 / tp4pp1dp1etp1ep1 "
        "x1; BS 60) | 0.262 | 1.36 | 0.350 (tp4 / tp4) | 0.300 (6/2, tp4 / tp4, pd-p; BS 96 at "
        "32.9 ms) | 1.09 | 1.049 | 1.040 |"
    ) in lines
    assert (
        "| llama-3.1-70b | h200 | 5 s / 33 ms | 1.36 | 1.175 | 0.997 | 1.000 | 1.049 | 1.000 | "
        "0.995 | 1.108 | 60 / 96 / 115 | refused: OOM |"
    ) in lines
    assert (
        "| qwen3-235b | t 36700, 2/2/5, binds pd-p, egress 99.9 Gbps; tp8 ep8 / roofline / tp8 "
        "| 4.14 (0.0287) | 72 H200, agg, ISL 27486 | 4.54 | 0.91 |"
    ) in lines
    assert lines[-1].startswith("aiconfigurator-core 0.12.0, data {'sglang': '0.5.14'}")
    assert "commit abc1234, wall 700 s" in lines[-1]


def test_a_part_the_run_did_not_make_is_left_out() -> None:
    text = render({"homogeneous_vs_disagg": []})
    assert "Prefill time" not in text and "across two clusters" not in text
    assert "#### Cell by cell" in text
