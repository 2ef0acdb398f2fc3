"""Where a stage trains and is scored: this machine's sandbox, or a Ray cluster.

The controller holds one executor and never asks which: it hands over a stage's spec
and gets back a ``StageWork`` (the training outcome and, when it trained, the
validation score), hearing the stage's steps and phases through ``StageHooks`` on the
way. The executor owns the warm worker's life: ``open`` starts it with the session,
``close`` stops it at the session's end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autorl import faults
from autorl.stages.evaluate import FrozenEvaluator
from autorl.stages.ray_stages import RayStages
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageRunner, StageWork, score_trained
from sandbox import WorkerPlan


@dataclass
class StageHooks:
    """What a running stage tells the controller (called from the stage's worker thread)."""

    on_step: Callable[[dict], None]
    on_phase: Callable[[str], None]
    should_stop: Callable[[], bool]


class Executor(Protocol):
    """What the controller asks of wherever stages run."""

    evaluator: FrozenEvaluator
    fetches_checkpoints: bool  # a stage fetches its parent's checkpoint from the store itself

    def open(self) -> None: ...
    def close(self) -> None: ...
    def slot_count(self, parallel: int) -> int: ...
    def describe(self, slots: int, parallel: int) -> list[str]: ...
    def run(self, attempt: int, spec: TrialSpec, hooks: StageHooks, run_id: str) -> StageWork: ...
    def score(self, outcome: StageOutcome, node_dir: Path, hooks: StageHooks) -> StageWork: ...
    def finished_outcome(self, node_dir: Path) -> StageOutcome | None: ...
    def outlived_stop(self, node_id: str, attempt: int, run_id: str) -> str | None: ...


class LocalStages:
    """Trains each stage in this machine's sandbox (through the warm worker when there is
    one), then scores its checkpoint with the frozen evaluator."""

    fetches_checkpoints = False

    def __init__(self, runner: StageRunner, evaluator: FrozenEvaluator, worker_plan: WorkerPlan | None = None):
        self.runner = runner
        self.evaluator = evaluator
        self.worker_plan = worker_plan

    def open(self) -> None:
        """Start the warm worker (its imports overlap the base model's scoring)."""
        if self.worker_plan is not None:
            self.runner.sandbox.start_worker(self.worker_plan)

    def close(self) -> None:
        self.runner.sandbox.stop_worker()

    def slot_count(self, parallel: int) -> int:
        """``--parallel``, but never more stages at once than GPUs when the session has GPUs."""
        gpus = len(self.runner.sandbox.gpus.gpus)
        return min(parallel, gpus) if gpus else parallel

    def describe(self, slots: int, parallel: int) -> list[str]:
        """Lines for the user: the sandbox tier, and how many stages run at once."""
        lines = [self.runner.sandbox.describe()]
        if parallel > 1:
            cpus = self.runner.sandbox.limits.cpus
            capped = f" (one per GPU; --parallel {parallel})" if slots < parallel else ""
            lines.append(f"up to {slots} stages at once{capped}" + (f", {cpus:g} CPUs each" if cpus else ""))
        return lines

    def run(self, attempt: int, spec: TrialSpec, hooks: StageHooks, run_id: str) -> StageWork:
        """Train the stage, then score it on validation."""
        node_dir = Path(spec.output_dir)
        outcome = self.runner.run(spec, node_dir, on_step=hooks.on_step, should_stop=hooks.should_stop)
        return self.score(outcome, node_dir, hooks)

    def score(self, outcome: StageOutcome, node_dir: Path, hooks: StageHooks) -> StageWork:
        """Score a stage that trained already (here, or before a stop)."""
        faults.point("trained")
        if outcome.ok:
            hooks.on_phase("evaluating")
        return score_trained(self.evaluator, outcome, node_dir)

    def finished_outcome(self, node_dir: Path) -> StageOutcome | None:
        """The outcome of a stage that ran to its end before the controller stopped."""
        return self.runner.finished_outcome(node_dir)

    def outlived_stop(self, node_id: str, attempt: int, run_id: str) -> str | None:
        """What still runs a node's stage after the controller stopped: nothing, here."""
        return None


class RayExecutor(LocalStages):
    """Trains and scores each stage as a job on a Ray cluster; a stage left trained by a
    stop, the base model and the test split are scored here."""

    fetches_checkpoints = True

    def __init__(self, runner: StageRunner, evaluator: FrozenEvaluator, ray: RayStages,
                 worker_plan: WorkerPlan | None = None):
        super().__init__(runner, evaluator, worker_plan)
        self.ray = ray

    def close(self) -> None:
        super().close()
        self.ray.close()

    def slot_count(self, parallel: int) -> int:
        return parallel  # the cluster places jobs on its GPUs

    def describe(self, slots: int, parallel: int) -> list[str]:
        sandbox, *rest = super().describe(slots, parallel)
        return [sandbox, self.ray.describe(), *rest]

    def run(self, attempt: int, spec: TrialSpec, hooks: StageHooks, run_id: str) -> StageWork:
        work = self.ray.run(attempt, spec, run_id, hooks.on_step, should_stop=hooks.should_stop)
        faults.point("trained")
        return work

    def outlived_stop(self, node_id: str, attempt: int, run_id: str) -> str | None:
        """The node's Ray job, when it still runs (or ran to its end) after the stop."""
        return self.ray.submission_id(node_id, attempt) if self.ray.outlived_stop(node_id, attempt, run_id) else None

