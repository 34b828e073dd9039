"""A managed engine child's output goes to its log file, not to the terminal, and its death
is reported with the file and its last lines (`serve.backends.vllm.child_log`; `vllm serve` prints
~350 lines while it starts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from prfaas.serve.backends.vllm.child_log import exit_report, log_path, spawn_logged
from prfaas.serve.config.deployment import Backend, default_deployment
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.launch.launcher import _with_engine_log_dir

NOISY = "import sys\nfor i in range(350): print(f'INFO start-up line {i}')\n"
NOISY += "print('ERROR the reason it died', file=sys.stderr); sys.exit(3)"


def test_the_childs_output_goes_to_its_file_and_its_death_quotes_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = log_path(str(tmp_path / "logs"), "pdd-0")
    assert path == tmp_path / "logs" / "pdd-0.log"
    for _ in range(2):  # a restart appends
        child = spawn_logged([sys.executable, "-u", "-c", NOISY], path, env={})
        assert child.wait(timeout=60) == 3
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # nothing on this process's terminal
    lines = path.read_text().splitlines()
    assert len(lines) == 2 * 351 and lines[-1] == "ERROR the reason it died"
    report = exit_report("vllm serve", 3, path)
    assert report.startswith(f"vllm serve exited with code 3 (log: {path}): INFO start-up")
    assert report.endswith("INFO start-up line 349 | ERROR the reason it died")


def test_prfaas_up_gives_a_vllm_deployment_a_log_directory_of_its_run() -> None:
    base = default_deployment()
    assert _with_engine_log_dir(base) == base  # torch: no engine child
    instances = tuple(i.model_copy(update={"backend": Backend.VLLM}) for i in base.instances)
    vllm = base.model_copy(update={"instances": instances})
    logged = _with_engine_log_dir(vllm)
    assert logged.vllm.log_dir is not None and Path(logged.vllm.log_dir).is_dir()
    Path(logged.vllm.log_dir).rmdir()
    chosen = vllm.model_copy(update={"vllm": VllmSpec(log_dir="/var/log/prfaas")})
    assert _with_engine_log_dir(chosen).vllm.log_dir == "/var/log/prfaas"
