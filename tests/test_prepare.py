"""env/prepare.py is deterministic, and what it builds is the shipped base model in substance.

Bit-for-bit equality with the shipped weights cannot be asked of another machine:
floating-point kernels differ between CPUs (AVX2 vs AVX512 builds of the same torch give
different last bits). So: two builds on this machine are identical, the tokenizer and
config equal the shipped ones exactly, and the rebuilt model scores within noise of
the shipped one on the validation split, with the frozen evaluator.
"""

import hashlib
import json
import math
import subprocess
import sys

import pytest

from autorl import template as templates

ENV = templates.load("arith").env_dir
pytestmark = pytest.mark.slow


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out, *args):
    done = subprocess.run([sys.executable, str(ENV / "prepare.py"), "--out", str(out), *args],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def score(checkpoint, out):
    done = subprocess.run([sys.executable, str(ENV / "evaluate.py"), "--checkpoint", str(checkpoint),
                           "--split", "validation", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_two_builds_on_one_machine_are_identical(tmp_path):
    first, second = build(tmp_path / "a", "--steps", "40"), build(tmp_path / "b", "--steps", "40")
    files = sorted(p.name for p in first.iterdir())
    assert "model.safetensors" in files and files == sorted(p.name for p in second.iterdir())
    for name in files:
        assert sha(first / name) == sha(second / name), name


def test_the_rebuilt_model_is_the_shipped_one_within_noise(tmp_path):
    rebuilt = build(tmp_path / "model")
    for name in ("tokenizer.json", "config.json"):
        assert sha(rebuilt / name) == sha(ENV / "base_model" / name), name
    ours, shipped = score(rebuilt, tmp_path / "ours.json"), score(ENV / "base_model", tmp_path / "shipped.json")
    noise = 2 * math.sqrt(ours["stderr"] ** 2 + shipped["stderr"] ** 2)
    assert abs(ours["mean"] - shipped["mean"]) <= noise, (ours["mean"], shipped["mean"], noise)
