"""The GPU dependency set still resolves (pip's resolver against the package index,
nothing installed), so a pin that stops resolving fails here rather than on a user's GPU box."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow


def test_the_gpu_set_resolves(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--disable-pip-version-check", "--report", str(report),
                           "-c", str(REPO / "constraints" / "gpu.txt"), f"{REPO}[gpu]"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    resolved = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                for item in json.loads(report.read_text())["install"]}
    assert resolved["vllm"] == "0.33.0" and resolved["torch"] == "2.14.0"
    assert resolved["transformers"] == "5.20.2" and resolved["trl"] == "1.16.0"


def test_the_cpu_set_is_what_this_machine_runs():
    from importlib.metadata import version

    pins = dict(line.split("==") for line in (REPO / "constraints" / "cpu.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("trl", "transformers", "mlflow", "optuna"):
        assert version(name) == pins[name], name
    assert version("torch").startswith(pins["torch"])
