"""What a winner's train.py edits are worth: its schedule trained again without them.

A winner whose path edited ``train.py`` mixes two effects, its stage values and its
code. Training the same stages again (the same values, steps and seeds, from the base
model) with the template's ``train.py`` separates them: the paired difference on the
test items between the session's winner and the replay is what the edits bought, judged
against the evaluation's noise and the template's seed-to-seed spread
(:func:`autorl.analysis.noise.paired_comparison`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from autorl.analysis.noise import paired_comparison
from autorl.errors import SessionError
from autorl.stages.evaluate import FrozenEvaluator
from autorl.stages.frozen import FrozenGuard
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageRunner
from autorl.stages.template import Template
from autorl.stages.workspace import Workspace
from sandbox import Sandbox


@dataclass(frozen=True)
class EditWorth:
    """The winner against its schedule replayed with the template's ``train.py``."""

    winner_test: float
    replay_test: float
    delta: float  # winner minus replay, on the same test items
    stderr: float  # the paired difference's evaluation error
    stage_sd: float  # the template's seed-to-seed spread, added to the noise
    verdict: str  # "better": the edits gained beyond noise; "tie"; "worse"

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def replay_path(session_dir: Path, path: list[str], template: Template, train_py: str, work: Path,
                sandbox: Sandbox, wall_factor: float = 1.0) -> Path:
    """Train the stages of ``path`` again, in order, from the base model with ``train_py``;
    returns the last stage's checkpoint. Each stage keeps its recorded spec (values, steps,
    seed); only where it starts and writes changes, and its wall-clock limit times
    ``wall_factor``: a replay that runs beside other work must not die of a limit set to
    guard the session."""
    workspace = Workspace.create(template, work / "workspace")
    if train_py != workspace.train_script.read_text():
        workspace.commit_train_script(train_py, "replay")
    guard = FrozenGuard.record(workspace.path / "env")
    runner = StageRunner(workspace.path, sandbox, guard, pristine_env=template.path / "env")
    checkpoint = template.base_model_dir(workspace.path)
    for node_id in path:
        recorded = session_dir / "nodes" / node_id / "spec.json"
        if not recorded.is_file():
            raise SessionError(f"cannot replay {node_id}: its stage left no spec at {recorded}")
        node_dir = work / node_id
        fields = json.loads(recorded.read_text())
        spec = TrialSpec(**{**fields, "init_checkpoint": str(checkpoint), "output_dir": str(node_dir),
                            "metrics_path": str(node_dir / "metrics.jsonl"),
                            "wall_seconds": fields["wall_seconds"] * wall_factor})
        outcome = runner.run(spec, node_dir)
        if not outcome.ok:
            raise SessionError(f"the replay of {node_id} failed: {outcome.reason}")
        checkpoint = outcome.checkpoint
    return checkpoint


def edit_worth(session_dir: Path, path: list[str], template: Template, work: Path, sandbox: Sandbox,
               stage_sd: float = 0.0, wall_factor: float = 1.0,
               winner_checkpoint: Path | None = None) -> EditWorth:
    """Score the winner (the last node of ``path``; its checkpoint at ``winner_checkpoint``,
    in the run's artifact store since record version 4, else in the session folder) and its
    schedule replayed with the template's ``train.py`` on the test split, paired item by item."""
    workspace = Workspace.create(template, work / "scorer")
    guard = FrozenGuard.record(workspace.path / "env")
    evaluator = FrozenEvaluator(workspace.path, guard, sandbox, pristine_env=template.path / "env")
    checkpoint = winner_checkpoint or session_dir / "nodes" / path[-1] / "checkpoint"
    winner = evaluator.score(checkpoint, "test", work / "winner")
    replayed = replay_path(session_dir, path, template, workspace.train_script.read_text(), work / "replay", sandbox,
                           wall_factor)
    replay = evaluator.score(replayed, "test", work / "replay")
    comparison = paired_comparison(winner.items(), replay.items(), stage_sd=stage_sd)
    if comparison is None:
        raise SessionError("the winner and its replay share fewer than 2 test items")
    return EditWorth(winner.mean, replay.mean, comparison.delta, comparison.stderr, stage_sd, comparison.verdict)
