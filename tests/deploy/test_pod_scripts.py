"""`prfaas deploy pods`: each rendered pod as a start script that runs its container's command
with its container's environment (the Secret's values, never the caller's `PRFAAS_*`), the
secrets in a file only its owner reads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from k8s_checks import EXAMPLE

from prfaas.deploy.pod_scripts import DEPLOYMENT_FILE
from prfaas.deploy.pods import pod_file, pod_processes
from prfaas.deploy.render import render, write

# Stands in for the interpreter: records what the script started it with.
RECORDER = """#!{python}
import json, os, sys
with open(os.path.join({where!r}, os.environ["RECORD_AS"] + ".json"), "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, f)
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("k8s")
    write(render(EXAMPLE), out)
    return out


def _pods_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "prfaas", "deploy", "pods", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)


def test_each_pod_runs_its_command_with_only_its_own_environment(
    rendered: Path, tmp_path: Path
) -> None:
    recorder = tmp_path / "python"
    recorder.write_text(RECORDER.format(python=sys.executable, where=str(tmp_path)))
    recorder.chmod(0o755)
    scripts = tmp_path / "pods"
    result = _pods_cli(str(rendered), "--to", str(scripts), "--python", str(recorder))
    assert result.returncode == 0, result.stderr
    expected = pod_processes(rendered, scripts / DEPLOYMENT_FILE, str(recorder), base_env={})
    assert len(result.stdout.splitlines()) == len(expected) > 2
    caller = {**os.environ, "PRFAAS_TRANSFER_SECRET": "the-callers-own", "PRFAAS_STRAY": "1"}
    for pod in expected:
        script = str(scripts / f"{pod.pod}.sh")
        subprocess.run([script], env={**caller, "RECORD_AS": pod.pod}, check=True, timeout=60)
        seen = json.loads((tmp_path / f"{pod.pod}.json").read_text())
        assert seen["argv"] == list(pod.argv[1:])
        theirs = {k: v for k, v in seen["env"].items() if k.startswith("PRFAAS_")}
        assert theirs == {k: v for k, v in pod.env.items() if k.startswith("PRFAAS_")}
        assert all(seen["env"][k] == v for k, v in pod.env.items())
        assert "PRFAAS_TRANSFER_SECRET" in theirs  # from the Secret, not the caller
    assert (scripts / DEPLOYMENT_FILE).read_text() and pod_file(rendered)


def test_the_environment_files_are_private(rendered: Path, tmp_path: Path) -> None:
    assert _pods_cli(str(rendered), "--to", str(tmp_path)).returncode == 0
    env_files = list(tmp_path.glob("*.env"))
    assert env_files
    for path in env_files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert "PRFAAS_TRANSFER_SECRET=" in path.read_text()
    for path in tmp_path.glob("*.sh"):
        assert "SECRET" not in path.read_text()


def test_a_directory_without_manifests_is_one_line(tmp_path: Path) -> None:
    result = _pods_cli(str(tmp_path), "--to", str(tmp_path / "pods"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "run prfaas deploy render" in result.stderr
    assert not (tmp_path / "pods").exists()
