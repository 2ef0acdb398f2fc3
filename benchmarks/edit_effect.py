"""What one train.py edit does to one stage: the same stage with and without it, several seeds.

An edit proposal is a claim about the training code; this measures it the way a stage
would run it (sandboxed, the frozen evaluator, the validation split), paired by seed:
each seed trains the stage once with the template's train.py and once with the edit.

    .venv/bin/python benchmarks/edit_effect.py --template digitsort \\
        --search 'lr_scheduler_type=' --replace ... --set learning_rate=1.5e-4 --set max_steps=40 --seeds 3

``--search``/``--replace`` is one search/replace block on train.py, as an LLM proposal
writes it; ``--set`` changes a stage value from the space's defaults.
Writes edit_effect-<template>-<label>.md to --out.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import tempfile
from pathlib import Path

from autorl.stages import template as templates
from autorl.stages.evaluate import FrozenEvaluator
from autorl.stages.frozen import FrozenGuard
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageRunner
from autorl.stages.workspace import Workspace
from sandbox import choose_sandbox


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="digitsort")
    parser.add_argument("--search", required=True)
    parser.add_argument("--replace", required=True)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    return parser.parse_args()


def stage_score(template, train_py: str, values: dict, seed: int, work: Path, sandbox) -> float:
    workspace = Workspace.create(template, work / "workspace")
    workspace.commit_train_script(train_py, "variant")
    guard = FrozenGuard.record(workspace.path / "env")
    runner = StageRunner(workspace.path, sandbox, guard, template.path / "env")
    node_dir = work / "stage"
    spec = TrialSpec(node_id="stage", init_checkpoint=str(template.base_model_dir(workspace.path)),
                     output_dir=str(node_dir), metrics_path=str(node_dir / "metrics.jsonl"), hyperparameters=values,
                     max_steps=int(values["max_steps"]), seed=seed, wall_seconds=template.stage_wall_seconds)
    outcome = runner.run(spec, node_dir)
    if not outcome.ok:
        raise SystemExit(f"seed {seed}: {outcome.reason}")
    return FrozenEvaluator(workspace.path, guard, sandbox, template.path / "env").score(
        outcome.checkpoint, "validation", node_dir).mean


def main() -> int:
    args = parse_args()
    template = templates.load(args.template)
    original = (template.path / "train.py").read_text()
    if original.count(args.search) != 1:
        raise SystemExit(f"--search must occur exactly once in {args.template}'s train.py")
    edited = original.replace(args.search, args.replace)
    values = template.space.defaults() | {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.set)}
    sandbox = choose_sandbox("auto")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(1, args.seeds + 1):
            without = stage_score(template, original, values, seed, Path(tmp) / f"a{seed}", sandbox)
            with_edit = stage_score(template, edited, values, seed, Path(tmp) / f"b{seed}", sandbox)
            rows.append((seed, without, with_edit))
            print(f"seed {seed}: without {without:.3f}, with {with_edit:.3f}", flush=True)
    diffs = [b - a for _, a, b in rows]
    mean = statistics.mean(diffs)
    spread = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
    table = "\n".join(f"| {seed} | {a:.3f} | {b:.3f} | {b - a:+.3f} |" for seed, a, b in rows)
    text = (f"# Edit effect: {args.label} ({args.template})\n\nOne stage from the base model, values "
            f"{values}, with the template's train.py and with the edit `{args.search}` → `{args.replace}`, "
            f"paired by training seed, scored on the validation split.\n\n| seed | without | with | difference |\n"
            f"|---|---|---|---|\n{table}\n\nMean difference {mean:+.3f} (sd over seeds {spread:.3f}, "
            f"{len(rows)} seeds).\n")
    (args.out / f"edit_effect-{args.template}-{args.label}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
