"""The shipped base model is exactly what env/prepare.py builds."""

import hashlib
import subprocess
import sys

import pytest

from autorl import template as templates


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_prepare_rebuilds_the_shipped_model_bit_for_bit(tmp_path):
    env = templates.load("arith").env_dir
    done = subprocess.run([sys.executable, str(env / "prepare.py"), "--out", str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert sha(tmp_path / "model" / name) == sha(env / "base_model" / name), name
