"""The code stays lint-clean: `ruff check` with pyproject's [tool.ruff] rules passes."""

import subprocess
import sys

import pytest
from conftest import REPO


def test_ruff_check_passes():
    pytest.importorskip("ruff", reason="ruff is not installed (pip install -e '.[dev]')")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", str(REPO)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
