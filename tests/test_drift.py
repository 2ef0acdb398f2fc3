"""Weight drift: how far a stage moved the weights, read from the two checkpoints' files."""

import pytest
import torch
from safetensors.torch import save_file

from autorl.analysis.drift import weight_drift


def checkpoint(folder, **tensors):
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def test_drift_is_the_relative_distance_over_the_floating_point_tensors_both_hold(tmp_path):
    start = checkpoint(tmp_path / "a", w=torch.full((3, 4), 2.0), b=torch.zeros(4), ids=torch.arange(5))
    end = checkpoint(tmp_path / "b", w=torch.full((3, 4), 2.0) + 0.5 * torch.eye(3, 4), b=torch.ones(4),
                     ids=torch.arange(5) + 1)
    drift = weight_drift(start, end)
    expected = ((3 * 0.25 + 4 * 1.0) / (12 * 4.0)) ** 0.5  # ‖Δw‖² + ‖Δb‖² over ‖w‖² + ‖b‖²; integer ids skipped
    assert drift.tensors == 2 and drift.relative == pytest.approx(expected)


def test_shards_are_read_by_tensor_name_and_bf16_weights_are_measured(tmp_path):
    start = checkpoint(tmp_path / "a", w=torch.ones(8, dtype=torch.bfloat16))
    end = tmp_path / "b"
    end.mkdir()
    save_file({"other": torch.ones(2)}, str(end / "model-00001-of-00002.safetensors"))
    save_file({"w": torch.full((8,), 1.5, dtype=torch.bfloat16)}, str(end / "model-00002-of-00002.safetensors"))
    assert weight_drift(start, end).relative == pytest.approx(0.5)


def test_no_drift_where_the_checkpoints_share_no_weights(tmp_path):
    base = checkpoint(tmp_path / "base", **{"model.w": torch.ones(4)})
    adapter = checkpoint(tmp_path / "adapter", **{"lora_A.weight": torch.ones(2, 4)})  # a LoRA stage's checkpoint
    zero = checkpoint(tmp_path / "zero", **{"model.w": torch.zeros(4)})
    assert weight_drift(base, adapter) is None
    assert weight_drift(zero, base) is None  # nothing to be relative to
    assert weight_drift(base, tmp_path / "missing") is None
