"""The frozen evaluator: scores the base model, refuses unsafe checkpoints."""

import json
import shutil

import pytest

from autorl.errors import CheckpointError
from autorl.stages import template as templates
from autorl.stages.evaluate import FrozenEvaluator, check_checkpoint
from autorl.stages.frozen import FrozenGuard
from autorl.stages.workspace import Workspace
from sandbox import choose_sandbox


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    workspace = Workspace.create(templates.load("arith"), tmp_path_factory.mktemp("ws") / "ws")
    return FrozenEvaluator(workspace.path, FrozenGuard.record(workspace.path / "env"), choose_sandbox("auto"))


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
def test_scores_the_base_model_with_standard_error(evaluator, tmp_path):
    base = templates.load("arith").base_model_dir()
    result = evaluator.score(base, "validation", tmp_path)
    assert result.n == 1000
    assert 0.45 < result.mean < 0.62  # the shipped base model is at about half accuracy
    assert result.stderr == pytest.approx((result.mean * (1 - result.mean) / 999) ** 0.5)
    items = result.items()
    assert len(items) == 1000 and {"id", "a", "b", "completion", "correct"} <= set(items[0])
    assert len({item["id"] for item in items}) == 1000  # unique: children and parents are paired by id


def test_refuses_train_split(evaluator, tmp_path):
    with pytest.raises(CheckpointError, match="evaluation failed"):
        evaluator.score(templates.load("arith").base_model_dir(), "train", tmp_path)


@pytest.mark.parametrize(
    ("extra_file", "message"),
    [("pytorch_model.bin", "not a weights or tokenizer file"), ("modeling_evil.py", "not a weights or tokenizer file")],
)
def test_rejects_checkpoints_that_carry_code(tmp_path, extra_file, message):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(templates.load("arith").base_model_dir(), checkpoint)
    (checkpoint / extra_file).write_bytes(b"\x80\x04payload")
    with pytest.raises(CheckpointError, match=message):
        check_checkpoint(checkpoint)


def test_rejects_remote_code_config(tmp_path):
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(templates.load("arith").base_model_dir(), checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Evil"}
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="remote code"):
        check_checkpoint(checkpoint)
