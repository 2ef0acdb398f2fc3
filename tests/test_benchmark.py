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


def test_the_llm_benchmark_reports_the_margin_and_each_edits_worth_from_what_its_folder_holds(tmp_path):
    """`llm_search.py --report-only` on recorded sessions: medians, the paired table, the
    margin against the best baseline and an edited winner's replay, in both files."""
    work = tmp_path / "work"
    work.mkdir()
    rows = []
    for seed, (llm, tree, grid) in enumerate([(0.82, 0.76, 0.72), (0.80, 0.77, 0.74), (0.81, 0.75, 0.70)], 100):
        for strategy, test in (("llm", llm), ("tree", tree), ("grid", grid)):
            rows.append({"strategy": strategy, "seed": seed, "best_test": test, "best_test_stderr": 0.013,
                         "best_path": ["n001", "n002"], "train_steps": 160, "wall_seconds": 60.0,
                         "winner_edited": strategy == "llm" and seed > 100, "requests": 5, "repairs": 0,
                         "tokens": 0, "edit_ablation": {"winner_test": test, "replay_test": test - gain,
                                                        "delta": gain, "stderr": 0.012, "stage_sd": 0.014,
                                                        "verdict": "better" if gain > 0.04 else "tie"}
                         if strategy == "llm" and (gain := {101: 0.05, 102: 0.02}.get(seed)) else None})
    (work / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    earlier = tmp_path / "earlier.json"  # an earlier run's file: its pbt is taken, its tree is not (tree runs here)
    earlier.write_text(json.dumps({"template": "digitsort", "train_steps": 160, "sessions": [
        {"strategy": s, "seed": seed, "best_test": 0.70, "best_test_stderr": 0.014, "best_path": ["n001"],
         "train_steps": 160, "source": "this benchmark", "commit": "abc1234"}
        for s in ("pbt", "tree") for seed in (100, 101, 102)]}))
    relay = work / "relay" / "llm-100"
    relay.mkdir(parents=True)
    (relay / "req-000.json").write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 40}]}))
    done = subprocess.run([sys.executable, "benchmarks/llm_search.py", "--work", str(work), "--out", str(tmp_path),
                           "--strategies", "llm,tree,grid", "--baselines-from", str(earlier), "--report-only"],
                          cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "llm_search-digitsort.json").read_text())
    assert data["margin"] == {"llm_strategy": "llm", "baseline": "tree", "points": pytest.approx(5.0), "seeds": 3,
                              "target_points": 5.0, "met": True}
    assert data["paired"]["llm-grid"]["wins"] == 3 and data["summary"]["llm"]["winners_edited"] == 2
    assert data["summary"]["pbt"]["test_median"] == 0.70 and data["summary"]["tree"]["test_median"] == 0.76
    assert data["edit_worth"]["mean_difference"] == pytest.approx(0.035) and data["edit_worth"]["wins"] == 2
    assert [s.get("prompt_chars") for s in data["sessions"] if s["strategy"] == "llm"] == [40, None, None]
    text = (tmp_path / "llm_search-digitsort.md").read_text()
    assert "- llm 101: 0.800 ± 0.013; n001 › n002 (edited)" in text
    assert "without its edits 0.750 (+5.0 ± 1.2 points paired, stage sd 0.014: better)" in text
    assert "+3.5 points on average, 2 gains / 0 losses of 2" in text
    assert "- pbt 101: 0.700 ± 0.014; n001; 160 steps; benchmarks/results/earlier.json, code abc1234" in text
