"""The template's train.py with real TRL on the tiny model."""

import json
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from autorl.stages import template as templates
from autorl.stages.spec import TrialSpec
from sandbox import parse_footer, scrubbed_env

TRL_KEYS = {"reward", "reward_std", "frac_reward_zero_std", "entropy", "loss", "grad_norm", "learning_rate",
            "completions/mean_length", "completions/clipped_ratio", "kl"}


@pytest.mark.slow
def test_one_stage_trains_and_reports(tmp_path):
    template = templates.load("arith")
    workspace = tmp_path / "ws"
    templates.copy_to(template, workspace)
    base = template.base_model_dir()
    hyperparameters = {**template.space.defaults(), "beta": 0.04, "learning_rate": 1e-4}
    spec = TrialSpec(node_id="n001", init_checkpoint=str(base), output_dir=str(tmp_path), wall_seconds=120,
                     metrics_path=str(tmp_path / "metrics.jsonl"), hyperparameters=hyperparameters, max_steps=3, seed=1)
    spec.write(tmp_path / "spec.json")
    done = subprocess.run([sys.executable, str(workspace / "train.py"), "--spec", str(tmp_path / "spec.json")],
                          cwd=tmp_path, env=scrubbed_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]

    footer = parse_footer(done.stdout)
    assert footer["status"] == "ok" and footer["steps"] == "3"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert TRL_KEYS <= set(steps[0])  # kl is logged because beta > 0

    checkpoint = tmp_path / "checkpoint"
    assert (checkpoint / "model.safetensors").is_file()
    assert not list(checkpoint.glob("*.bin")) and not list(checkpoint.glob("*.pt"))
    before, after = load_file(base / "model.safetensors"), load_file(checkpoint / "model.safetensors")
    assert any(not before[k].equal(after[k]) for k in before), "GRPO changed no parameter"
