"""The search-efficiency benchmark's quick mode: real sessions, the report, the plot."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.slow  # real GRPO sessions of the benchmark


def test_search_efficiency_quick_mode(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "search_efficiency.py"), "--quick",
                           "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=1200, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "search_efficiency_quick.json").read_text())
    assert set(data["summary"]) == {"tree", "grid"}
    for session in data["sessions"]:
        assert len(session["best_so_far"]) == 2 and session["best_test"] is not None
        assert 0.3 < session["base_test"] < 0.7
    table = (tmp_path / "out" / "search_efficiency_quick.md").read_text()
    assert "| tree |" in table and "| grid |" in table and "vs grid" in table
    assert (tmp_path / "out" / "search_efficiency_quick.png").stat().st_size > 1000
