"""The first run a new user makes: `autorl research TOPIC` with every default, timed.

Runs the README's first command (the default template, budget and strategy) once per
search seed, each in a fresh runs directory, timed from the command's start to its exit,
and reads back the base model's and the winner's test scores. A gain counts when it is
beyond twice the combined standard error of the two test scores. Run it on an idle
machine: the time is the point.

    .venv/bin/python benchmarks/first_run.py [--seeds 0,1]

Writes benchmarks/results/first_run.json and first_run.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
AUTORL = [sys.executable, "-m", "autorl"]
TOPIC = "can GRPO stages beat the base model at sorting digits"  # scripts/research's default


def session(seed: int, runs: Path) -> dict:
    started = time.monotonic()
    args = ["research", TOPIC, "--name", f"first-{seed}", "--runs-dir", str(runs)]
    if seed != 0:  # 0 is the default; the first run passes nothing
        args += ["--seed", str(seed)]
    done = subprocess.run([*AUTORL, *args], capture_output=True, text=True, cwd=REPO)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"seed {seed}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads(subprocess.run([*AUTORL, "show", f"first-{seed}", "--json", "--runs-dir", str(runs)],
                                     capture_output=True, text=True, check=True, cwd=REPO).stdout)
    best, base = data["best"], data["base_test_score"]
    n = len(json.loads((runs / "sessions" / f"first-{seed}" / "base" / "eval_test.json").read_text())["items"])
    base_se = math.sqrt(base * (1 - base) / n)
    gain = best["test_score"] - base
    two_se = 2 * math.sqrt(best["test_stderr"] ** 2 + base_se ** 2)
    return {"seed": seed, "seconds": round(seconds, 1), "template": data["template"], "stages": len(data["nodes"]),
            "train_steps": data["train_steps_spent"], "base_val": data["base_score"],
            "best_node": best["id"], "best_path": best["path"], "best_val": best["val_score"],
            "base_test": base, "base_test_stderr": round(base_se, 4), "best_test": best["test_score"],
            "best_test_stderr": best["test_stderr"], "gain_points": round(100 * gain, 1),
            "two_se_points": round(100 * two_se, 1), "beats_base": data["beats_base"],
            "gain_beyond_noise": gain > two_se, "last_line": done.stdout.strip().splitlines()[-3]}


def report(result: dict) -> str:
    rows = "\n".join(
        f"| {s['seed']} | {s['seconds'] / 60:.1f} min | {s['stages']} | {s['train_steps']} | "
        f"{s['base_test']:.3f} ± {s['base_test_stderr']:.3f} | {s['best_test']:.3f} ± {s['best_test_stderr']:.3f} "
        f"({s['best_node']}, {' › '.join(s['best_path'])}) | {s['gain_points']:+.1f} | {s['two_se_points']:.1f} | "
        f"{'yes' if s['gain_beyond_noise'] else 'no'} |" for s in result["sessions"])
    header = ("| seed | wall time | stages | GRPO steps | base test | best test (node, path) | gain (points) | "
              "2 × combined SE | beyond noise |")
    return f"""# The first run

`benchmarks/first_run.py`: `autorl research "{TOPIC}"` with every default (template
`{result['sessions'][0]['template']}`, 160 GRPO steps, tree search) for search seeds
{', '.join(str(s['seed']) for s in result['sessions'])}, one after another, timed from the
command's start to its exit; {result['machine']}.

{header}
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{rows}

The test split (1,000 problems) is scored once, at the end, for the base model and the
node with the best validation score.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--out", type=Path, default=RESULTS / "first_run.json")
    args = parser.parse_args()
    sessions = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            runs = Path(tmp) / f"runs{seed}"
            runs.mkdir()
            sessions.append(session(seed, runs))
            print(json.dumps(sessions[-1]), flush=True)
    load = os.getloadavg()[0]
    result = {"machine": f"{os.cpu_count()} CPUs, load average {load:.1f} at the end, {time.strftime('%Y-%m-%d')}",
              "topic": TOPIC, "sessions": sessions}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
