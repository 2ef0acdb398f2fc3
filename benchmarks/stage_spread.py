"""The noise floor: the same stage (the space's defaults, from the base model) trained
with different seeds, each scored on the validation split.

The spread of those scores is what a search cannot see past; compare it with one
evaluation's standard error.

    .venv/bin/python benchmarks/stage_spread.py [--seeds 5]
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--template", default="arith")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "stage_spread.md")
    args = parser.parse_args()
    template = templates.load(args.template)
    sandbox = choose_sandbox("auto")
    scores = []
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Workspace.create(template, Path(tmp) / "workspace")
        guard = FrozenGuard.record(workspace.path / "env")
        runner = StageRunner(workspace.path, sandbox, guard, template.path / "env")
        evaluator = FrozenEvaluator(workspace.path, guard, sandbox, template.path / "env")
        values = template.space.defaults()
        for seed in range(1, args.seeds + 1):
            node_dir = Path(tmp) / f"seed{seed}"
            spec = TrialSpec(node_id=f"seed{seed}", init_checkpoint=str(template.base_model_dir(workspace.path)),
                             output_dir=str(node_dir), metrics_path=str(node_dir / "metrics.jsonl"),
                             hyperparameters=values, max_steps=int(values["max_steps"]), seed=seed,
                             wall_seconds=template.stage_wall_seconds)
            outcome = runner.run(spec, node_dir)
            if not outcome.ok:
                raise SystemExit(f"seed {seed}: {outcome.reason}")
            result = evaluator.score(outcome.checkpoint, "validation", node_dir)
            scores.append((seed, result.mean, result.stderr))
            print(f"seed {seed}: {result.mean:.3f} ± {result.stderr:.3f}", flush=True)
    means = [m for _, m, _ in scores]
    rows = "\n".join(f"| {seed} | {mean:.3f} | {stderr:.3f} |" for seed, mean, stderr in scores)
    text = (f"# Run-to-run spread of one stage\n\nThe default stage ({values['max_steps']} GRPO steps from the base "
            f"model, template `{args.template}`), trained with {args.seeds} seeds, scored on the 1,000 validation "
            f"problems.\n\n| seed | validation | stderr |\n|---|---|---|\n{rows}\n\n"
            f"Spread across seeds: sd {statistics.stdev(means):.3f}, range {min(means):.3f}–{max(means):.3f}; one "
            f"evaluation's standard error ≈ {statistics.median(s for *_, s in scores):.3f}.\n")
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
