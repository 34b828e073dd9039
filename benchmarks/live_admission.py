"""Live admission control at 2x saturation against the simulator (issue 15, live check).

The scaled case study's PrfaaS-PD layout (configs/case-study-prfaas-pd.yaml: 12 emulated
instances, time_factor 2) with `router.admission: {mode: shed, ttft_slo_s: 10 x time_factor}`
is offered the paper's lognormal workload (128-token outputs) at `--load` x the planner's
Lambda_max (modelled req/s; 2 by default: far past saturation). The same arrivals go through
the simulator with `simulation.admission: {mode: shed}` and the SLO TTFT 10 s / TPOT 25 ms in
modelled time (benchmarks/sim_vs_live.py's scenario). Reported, live and simulated in wall
time: goodput (requests in SLO per second, first arrival -> last token), requests in SLO,
rejected (429 live), completed and failed, and whether every request ended completed, failed
with a reason or rejected. Prints JSON, writes --save. About 4 minutes:

    .venv/bin/python benchmarks/live_admission.py --save /tmp/live_admission.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from prfaas.serve.config.admission_spec import AdmissionSpec
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher
from provenance import emit, git_sha, host
from sim_vs_live import LAYOUTS, PRFAAS, ROOT, TIME_FACTOR, lognormal_arrivals, scenario_yaml

LAYOUT = "prfaas-pd"
TTFT_SLO_S = 10.0  # modelled; live x TIME_FACTOR
TPOT_SLO_S = 0.025
OUTPUT_TOKENS = 128


def planner_lambda() -> float:
    out = subprocess.run(
        [PRFAAS, "plan", "--scenario", "paper-case-study", "--json"],
        capture_output=True,
        check=True,
    )
    return float(json.loads(out.stdout)["prfaas_pd"]["lambda_max"])


def simulate(work: Path, arrivals: Path) -> dict[str, Any]:
    scenario = work / "scenario-admission.yaml"
    scenario.write_text(
        scenario_yaml(LAYOUT)
        + f"  slo: {{ttft_s: {TTFT_SLO_S}, tpot_s: {TPOT_SLO_S}}}\n"
        + "  admission: {mode: shed}\n"
    )
    cmd = [PRFAAS, "simulate", "-s", str(scenario), "--trace", str(arrivals)]
    cmd += ["--policy", LAYOUTS[LAYOUT][1], "--json"]
    out = subprocess.run(cmd, capture_output=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"simulate failed: {out.stderr.decode()[-2000:]}")
    metrics: dict[str, Any] = json.loads(out.stdout)[0]["metrics"]
    return metrics


def live(work: Path, arrivals: Path, n: int) -> dict[str, Any]:
    deployment = load_deployment(ROOT / LAYOUTS[LAYOUT][0])
    admission = AdmissionSpec(mode="shed", ttft_slo_s=TTFT_SLO_S * TIME_FACTOR)
    router = deployment.router.model_copy(update={"port": 0, "admission": admission})
    deployment = deployment.model_copy(update={"router": router})
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "live-admission-secret-0123456789")
    save = work / "live-admission.json"
    slo = f"ttft:{TTFT_SLO_S * TIME_FACTOR * 1000:.0f},tpot:{TPOT_SLO_S * TIME_FACTOR * 1000:.0f}"
    with Launcher(deployment) as launcher:
        launcher.wait_healthy(300)
        bench = [PRFAAS, "bench", "--endpoint", launcher.url, "--trace", str(arrivals)]
        bench += ["--time-scale", str(TIME_FACTOR), "--num-requests", str(n), "--goodput", slo]
        bench += ["--model", "prfaas-1t", "--json", "--save", str(save)]
        bench += ["--records", str(save.with_suffix(".records.jsonl"))]
        subprocess.run(bench, capture_output=True, check=False)
    metrics: dict[str, Any] = json.loads(save.read_text())["metrics"]
    return metrics


def _view(metrics: dict[str, Any], scale_s: float) -> dict[str, Any]:
    """Counts, and goodput / throughput per wall second (`scale_s`: modelled -> wall)."""
    goodput = (metrics["goodput_per_s"] or 0.0) / scale_s
    duration_s = metrics["duration_s"] * scale_s
    return {
        "offered": metrics["num_requests"],
        "completed": metrics["num_completed"],
        "failed": metrics["num_failed"],
        "failures": metrics["failures"],
        "rejected": metrics["num_rejected"],
        "rejections": metrics["rejections"],
        "in_slo": round(goodput * duration_s),
        "goodput_per_s": goodput,
        "duration_s": duration_s,
        "ttft_p90_s": None
        if metrics["ttft_s"]["p90"] is None
        else metrics["ttft_s"]["p90"] * scale_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--load", type=float, default=2.0, help="x the planner's Lambda_max")
    ap.add_argument("--num-requests", type=int, default=160)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--work-dir", default="/tmp/prfaas-live-admission")
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    rate = args.load * planner_lambda()
    arrivals = work / "arrivals.jsonl"
    rows = lognormal_arrivals(args.num_requests, rate, OUTPUT_TOKENS, args.seed)
    arrivals.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sim = _view(simulate(work, arrivals), TIME_FACTOR)
    got = _view(live(work, arrivals, args.num_requests), 1.0)
    ended = got["completed"] + got["failed"] + got["rejected"]
    result = {
        "benchmark": "live_admission",
        "offered_modelled_per_s": rate,
        "sim": sim,
        "live": got,
        "goodput_live_over_sim": got["goodput_per_s"] / sim["goodput_per_s"]
        if sim["goodput_per_s"]
        else None,
        "every_request_ended": ended == args.num_requests,
        "loadavg": os.getloadavg(),
        "config": {**vars(args), "time_factor": TIME_FACTOR},
        "git_sha": git_sha(),
        "host": host(),
    }
    emit(result, args.save)


if __name__ == "__main__":
    main()
