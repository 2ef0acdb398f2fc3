"""A real pretrained model learning on this machine: one `autorl research` session on a
template (by default `wordproblems` with SmolLM2-135M-Instruct), timed from the command's
start to its exit, with the base model's and the winner's test scores.

    .venv/bin/python benchmarks/real_model.py [--template wordproblems] [--train-steps 30]

Writes benchmarks/results/real_model.json (model, template, stages, minutes, base and
best test scores with their standard errors), real_model.md beside it, and the session
report's figures as real_model-*.png. The gain counts when it is beyond twice the combined
standard error of the two test scores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
AUTORL = [sys.executable, "-m", "autorl"]
FIGURES = ("progress", "tree", "schedule")


def autorl(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTORL, *args], capture_output=capture, text=True, check=True)


def run_session(template: str, topic: str, train_steps: int, runs_dir: Path, name: str) -> float:
    """Run the session as a user would; the minutes from start to exit."""
    started = time.monotonic()
    autorl("research", topic, "--template", template, "--train-steps", str(train_steps), "--name", name,
           "--runs-dir", str(runs_dir), capture=False)
    return (time.monotonic() - started) / 60


def template_constants(template: str) -> dict:
    return tomllib.loads((Path("templates") / template / "env" / "constants.toml").read_text())


def summarize(data: dict, template: str, constants: dict, minutes: float) -> dict:
    model = constants["model"]["source"] or constants["model"]["base_model"]
    base, base_se = data["base_test_score"], binomial_stderr(data["base_test_score"], constants["eval"]["test_size"])
    best, best_se = data["best_test_score"], data["best_test_stderr"]
    combined = math.hypot(base_se, best_se)
    return {"model": model, "template": template, "stages": data["stages_spent"], "minutes": round(minutes, 1),
            "base_test": base, "base_stderr": round(base_se, 4), "best_test": best, "best_stderr": round(best_se, 4),
            "train_steps": data["train_steps_spent"], "base_val": data["base_score"],
            "best_val": data["best_val_score"], "best_node": data["best"]["id"],
            "gain": round(best - base, 4), "combined_stderr": round(combined, 4),
            "beyond_two_stderr": best - base > 2 * combined}


def binomial_stderr(mean: float, n: int) -> float:
    """The standard error the evaluator reports, for the base's test score (stored without it)."""
    return math.sqrt(mean * (1 - mean) / (n - 1))


def markdown(result: dict, data: dict) -> str:
    rows = "\n".join(f"| {n['id']} | {n.get('parent') or 'base'} | {n['steps']} | {n['val_score']:.3f} | "
                     + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                 for k, v in sorted(n["hyperparameters"].items())) + " |"
                     for n in data["nodes"] if n["val_score"] is not None)
    verdict = "beyond" if result["beyond_two_stderr"] else "not beyond"
    return f"""# A real model learns on this machine

`benchmarks/real_model.py`: one `autorl research` session on the `{result['template']}` template,
base model {result['model']}, {result['train_steps']} GRPO steps in {result['stages']} stages, timed
from the command's start to its exit: **{result['minutes']} minutes** on this machine
(2 CPU cores, no GPU).

| | validation (200) | test (500) |
|---|---|---|
| base model | {result['base_val']:.3f} | {result['base_test']:.3f} ± {result['base_stderr']:.3f} |
| best stage ({result['best_node']}) | {result['best_val']:.3f} \
| {result['best_test']:.3f} ± {result['best_stderr']:.3f} |

Gain on test: {100 * result['gain']:+.1f} points, {verdict} twice the combined standard error
({100 * 2 * result['combined_stderr']:.1f} points).

| stage | from | steps | validation | hyperparameters |
|---|---|---|---|---|
{rows}

![progress](real_model-progress.png)
![tree](real_model-tree.png)
![schedule](real_model-schedule.png)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="wordproblems")
    parser.add_argument("--topic", default="can GRPO teach SmolLM2-135M one-step word problems")
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--runs-dir", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.chdir(Path(__file__).resolve().parents[1])
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="real_model-"))
    name = f"real-model-{int(time.time())}"
    minutes = run_session(args.template, args.topic, args.train_steps, runs_dir, name)
    data = json.loads(autorl("show", name, "--json", "--runs-dir", str(runs_dir)).stdout)
    result = summarize(data, args.template, template_constants(args.template), minutes)
    autorl("report", name, "--runs-dir", str(runs_dir))
    report = runs_dir / "sessions" / name / "report"
    for figure in FIGURES:
        if (report / f"{figure}.png").is_file():
            shutil.copyfile(report / f"{figure}.png", args.out / f"real_model-{figure}.png")
    (args.out / "real_model.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "real_model.md").write_text(markdown(result, data))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
