"""How long `autorl resume` takes to rebuild a session of N nodes from MLflow.

Runs a session of N stages with a stand-in experiment and evaluator (tests/experiments:
stages copy the checkpoint, scoring takes milliseconds), SIGKILLs the controller after
the last stage was evaluated but before it was recorded, then times (a) rebuilding the
controller from MLflow (tree, Optuna study, workspace, budget) in-process and (b) the
whole `autorl resume` command, which also re-scores and records the last node and
scores the winner on the test split.

    .venv/bin/python benchmarks/resume_time.py [--nodes 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "resume_time.md")
    args = parser.parse_args()
    from conftest import make_template  # the stand-in template the resume tests use

    from autorl.config import prepare_runs_dir
    from autorl.resume import resume_session
    from autorl.storage.tracking import Tracker

    with tempfile.TemporaryDirectory() as tmp:
        template = make_template(Path(tmp) / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
        runs = Path(tmp) / "runs"
        env = {**os.environ, "AUTORL_RUNS_DIR": str(runs), "AUTORL_FAULT": f"evaluated:{args.nodes}"}
        command = [sys.executable, "-m", "autorl"]
        subprocess.run([*command, "research", "t", "--template", str(template), "--stages", str(args.nodes),
                        "--name", "r"], env=env, cwd=REPO, capture_output=True)
        tracker = Tracker.for_runs_dir(prepare_runs_dir(runs))
        started = time.monotonic()
        controller = resume_session("r", tracker)
        rebuild = time.monotonic() - started
        nodes = len(controller.tree.nodes)
        controller.lock.release()
        env.pop("AUTORL_FAULT")
        started = time.monotonic()
        done = subprocess.run([*command, "resume", "r"], env=env, cwd=REPO, capture_output=True, text=True)
        whole = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout, done.stderr)
            return 1
    text = (f"# Resume time\n\nA session of {nodes} nodes killed after its last stage was evaluated, before it was "
            f"recorded.\n\n| step | seconds |\n|---|---|\n| rebuild the controller from MLflow (in-process) | "
            f"{rebuild:.2f} |\n| whole `autorl resume` (process start, rebuild, re-score and record the last node, "
            f"test-split scoring, close) | {whole:.2f} |\n")
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
