"""How often the reward-collapse detector is right, on stages that really ran.

A "reward collapse" is critical: the node is not extended and its learning rate sets
the session's memory of what diverges. A false alarm therefore costs the search its
best nodes. This script re-reads every recorded stage under the given benchmark work
folders (``search_efficiency.py --work``: each holds ``template/`` and one runs folder
per session) and scores two rules against what the frozen evaluator said about the
same checkpoint (validation against the parent, paired):

- ``peak step``: the highest single step's reward against the mean of the last 3
  (the rule before this check);
- ``start or window``: autorl's detector (``autorl.analysis.diagnose.reward_collapse``): the first
  step or the best window of a quarter of the stage against the last window, beyond a
  share of the reward range and beyond the noise of one step.

    .venv/bin/python benchmarks/reward_collapse_check.py WORK [WORK ...] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from autorl.analysis.curves import read_records, series
from autorl.analysis.diagnose import COLLAPSE_SHARE, RewardScale, diagnose, reward_collapse
from autorl.stages import template as templates
from search.tree import Comparison

REPO = Path(__file__).resolve().parents[1]
VALIDATION_COLLAPSE = 0.25  # validation lost at least this share of the parent's score (search.memory)


def peak_step_rule(records: list[dict], scale: RewardScale) -> bool:
    reward = series(records, "reward")
    return len(reward) >= 6 and max(reward) - sum(reward[-3:]) / 3 > COLLAPSE_SHARE * scale.width


def stages(work: Path):
    """(outcome, records, scale, comparison, critical when it ran) for every scored stage
    with a parent comparison under ``work``."""
    scale = RewardScale(declared=templates.load(str(work / "template")).reward_width)
    for diagnosis in sorted(work.glob("*/sessions/*/nodes/*/diagnosis.json")):
        comparison = json.loads(diagnosis.read_text()).get("comparison")
        if not comparison:
            continue
        node = diagnosis.parent
        parent_score = parent_validation(node, json.loads((node / "spec.json").read_text()))
        score = json.loads((node / "eval_validation.json").read_text())["mean"]
        collapsed = parent_score is not None and parent_score - score > VALIDATION_COLLAPSE * parent_score
        outcome = "collapsed" if collapsed else "fell" if comparison["verdict"] == "worse" else "held"
        recorded = any(f["severity"] == "critical" for f in json.loads(diagnosis.read_text())["findings"])
        yield outcome, read_records(node / "metrics.jsonl"), scale, Comparison(**comparison), recorded


def parent_validation(node: Path, spec: dict) -> float | None:
    start = Path(spec.get("init_checkpoint") or "")
    scores = (start.parent / "eval_validation.json" if start.name == "checkpoint"
              else node.parents[1] / "base" / "eval_validation.json")
    return json.loads(scores.read_text())["mean"] if scores.exists() else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    totals, flagged = Counter(), {"peak step": Counter(), "start or window": Counter()}
    barred = {"as recorded": Counter(), "now": Counter()}  # stages the tree policy would not extend
    for work in args.work:
        for outcome, records, scale, comparison, recorded in stages(work):
            totals[outcome] += 1
            flagged["peak step"][outcome] += peak_step_rule(records, scale)
            flagged["start or window"][outcome] += reward_collapse(records, scale) is not None
            barred["as recorded"][outcome] += recorded
            barred["now"][outcome] += any(f.severity == "critical" for f in diagnose(records, comparison, scale))
    write(totals, flagged, barred, args)


def write(totals: Counter, flagged: dict[str, Counter], barred: dict[str, Counter], args: argparse.Namespace) -> None:
    rows = ["| rule | flagged where validation collapsed (>25% lost) | flagged where it fell (beyond noise) | "
            "flagged where it held or rose (false alarms) |", "|---|---|---|---|"]
    for rule, counts in flagged.items():
        cells = [f"{counts[o]} / {totals[o]} ({counts[o] / totals[o]:.0%})" if totals[o] else "—"
                 for o in ("collapsed", "fell", "held")]
        rows.append(f"| {rule} | " + " | ".join(cells) + " |")
    rows += ["", "Stages with any critical finding (the tree policy does not extend them), as the stages were "
             "diagnosed when they ran and by today's diagnosis:", "",
             "| diagnosis | where validation fell | where it held or rose |", "|---|---|---|"]
    for when, counts in barred.items():
        fell = counts["collapsed"] + counts["fell"]
        rows.append(f"| {when} | {fell} / {totals['collapsed'] + totals['fell']} "
                    f"| {counts['held']} / {totals['held']} |")
    text = "\n".join([
        "# Reward-collapse detector against the evaluator", "",
        *rows, "",
        f"{sum(totals.values())} stages re-read from {len(args.work)} benchmark folders "
        f"({', '.join(p.name for p in args.work)}). 'Collapsed' stages are a subset of 'fell' only when the "
        "paired test also called them worse; each stage is counted once, under the first of collapsed / fell / "
        "held that applies. Since this check, a curve-only finding (reward collapse, length truncation, zero-variance "
        "groups) on a stage whose validation did not fall is a warning, not critical "
        "(autorl/analysis/diagnose.py: confirmed_by_validation).", ""])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "reward_collapse_check.md").write_text(text)
    (args.out / "reward_collapse_check.json").write_text(json.dumps(
        {"stages": dict(totals), "flagged": {k: dict(v) for k, v in flagged.items()},
         "critical": {k: dict(v) for k, v in barred.items()}}, indent=1))
    print(text)


if __name__ == "__main__":
    main()
