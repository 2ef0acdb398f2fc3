"""Your own task from a data file: the word problems exported as JSONL, made into a template
by `autorl init --from-data`, and one short session on it.

    .venv/bin/python benchmarks/own_task.py [--train-steps 15]
    .venv/bin/python benchmarks/own_task.py --export-only FILE     # just write the JSONL

The file holds the built-in `wordproblems` template's stories (question, answer), as a user
would bring them; the template is generated with SmolLM2-135M-Instruct (the folder
scripts/setup writes into templates/wordproblems/env/base_model) and `--reward
last-number`. Writes benchmarks/results/own_task.json and own_task.md: the base model's and
the winner's test scores, and whether the gain is beyond twice their combined standard
error (the test split's items are the same for both, so this is conservative).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
AUTORL = [sys.executable, "-m", "autorl"]
WORDPROBLEMS = REPO / "templates" / "wordproblems"
PER_SPLIT = 1500  # stories taken from each of the built-in template's splits (validation and test hold ~520)


def export_wordproblems(path: Path) -> int:
    """The built-in word problems as a user's JSONL file of questions and answers; the row count."""
    spec = importlib.util.spec_from_file_location("wordproblems_task", WORDPROBLEMS / "env" / "task.py")
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    rows = [{"question": p["prompt"][-1]["content"], "answer": p["answer"]}
            for split in task.SPLITS for p in task.problems(split, min(PER_SPLIT, len(task.arithmetic_of(split))))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return len(rows)


def autorl(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([*AUTORL, *args], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"autorl {args[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def summarize(data: dict, test_size: int, minutes: float, made: str, train_steps: int) -> dict:
    base, best, best_se = data["base_test_score"], data["best_test_score"], data["best_test_stderr"]
    base_se = math.sqrt(base * (1 - base) / (test_size - 1))
    combined = math.hypot(base_se, best_se)
    return {"measured": time.strftime("%Y-%m-%d"), "init": made, "train_steps_budget": train_steps,
            "train_steps": data["train_steps_spent"], "stages": data["stages_spent"], "minutes": round(minutes, 1),
            "base_val": data["base_score"], "best_val": data["best_val_score"], "best_node": data["best"]["id"],
            "base_test": base, "base_stderr": round(base_se, 4), "best_test": best, "best_stderr": round(best_se, 4),
            "gain": round(best - base, 4), "combined_stderr": round(combined, 4),
            "beyond_two_stderr": best - base > 2 * combined}


def report(result: dict) -> str:
    return "\n".join([
        "# Your own task from a data file", "",
        f"`benchmarks/own_task.py`, measured {result['measured']} on 2 CPUs.", "",
        "The built-in word problems exported as a JSONL file of `question` and `answer`, made into a template by "
        "`autorl init DIR --from-data wordproblems.jsonl --base-model <SmolLM2-135M-Instruct> --reward last-number`:",
        "", f"> {result['init']}", "",
        f"One `autorl research` session on it, `--train-steps {result['train_steps_budget']}` "
        f"({result['stages']} stages, {result['train_steps']} steps, {result['minutes']} minutes):", "",
        "| | validation | test |", "| --- | --- | --- |",
        f"| base model | {result['base_val']:.3f} | {result['base_test']:.3f} ± {result['base_stderr']:.3f} |",
        f"| winner ({result['best_node']}) | {result['best_val']:.3f} | {result['best_test']:.3f} ± "
        f"{result['best_stderr']:.3f} |", "",
        f"Gain on test {result['gain']:+.3f}, combined standard error {result['combined_stderr']:.3f}: "
        f"**{'beyond' if result['beyond_two_stderr'] else 'not beyond'} two standard errors**.", ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-steps", type=int, default=15)
    parser.add_argument("--export-only", type=Path, help="write the JSONL file here and stop")
    parser.add_argument("--out", type=Path, default=RESULTS / "own_task.json")
    args = parser.parse_args()
    if args.export_only:
        print(f"{export_wordproblems(args.export_only)} rows written to {args.export_only}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        data_file = tmp / "wordproblems.jsonl"
        export_wordproblems(data_file)
        template = tmp / "own"
        printed = autorl("init", str(template), "--from-data", str(data_file), "--base-model",
                         str(WORDPROBLEMS / "env" / "base_model"), "--reward", "last-number").stdout
        made = " ".join(line.strip() for line in printed.splitlines() if not line.startswith("edit "))
        started = time.monotonic()
        autorl("research", "word problems from my own file", "--template", str(template), "--train-steps",
               str(args.train_steps), "--memory", "off", "--name", "own", "--runs-dir", str(tmp / "runs"))
        minutes = (time.monotonic() - started) / 60
        shown = json.loads(autorl("show", "own", "--json", "--runs-dir", str(tmp / "runs")).stdout)
        test_size = json.loads((template / "env" / "data" / "summary.json").read_text())["test"]
    result = summarize(shown, test_size, minutes, made, args.train_steps)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0 if result["beyond_two_stderr"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
