"""Running one training stage: write the spec, launch train.py, stream its metrics."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from autorl import faults
from autorl.analysis.curves import read_records, training_steps
from autorl.errors import CheckpointError, ContractError, FrozenFileError
from autorl.stages.frozen import FrozenGuard, run_guarded
from autorl.stages.spec import TrialSpec
from autorl.stages.timing import StageClock
from sandbox import Mounts, RunResult, Sandbox, parse_footer, scrubbed_env

if TYPE_CHECKING:
    from autorl.stages.evaluate import EvalResult, FrozenEvaluator


class MetricsTail:
    """Reads the complete lines appended to a JSON-lines file since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.records: list[dict] = []

    def restart(self) -> None:
        """Forget what a discarded attempt wrote (its file is removed)."""
        self.path.unlink(missing_ok=True)
        self.offset, self.records = 0, []

    def read_new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        new = []
        for line in complete.decode(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # untrusted output: skip what is not a JSON object
            if isinstance(record, dict):
                new.append(record)
        self.records.extend(new)
        return new


@dataclass
class StageOutcome:
    result: RunResult
    records: list[dict] = field(default_factory=list)
    checkpoint: Path | None = None
    reason: str | None = None
    timing: dict[str, float] = field(default_factory=dict)
    breach: bool = False  # the failure breaks the template contract (the template's bug, not the proposal's)
    checkpoint_stored: bool = False  # the checkpoint is in the node run's artifacts already (a Ray job put it)

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass
class StageWork:
    """A stage's training outcome and, when it trained, its validation score or the reason
    it could not be scored; what a worker thread (or a Ray job) hands back."""

    outcome: StageOutcome
    evaluation: EvalResult | None = None
    refusal: Exception | None = None  # FrozenFileError, CheckpointError or ContractError from scoring


def score_trained(evaluator: FrozenEvaluator, outcome: StageOutcome, node_dir: Path) -> StageWork:
    """A stage's outcome with its validation score when it trained, or why it could not be
    scored (the refusals that fail the node, not the session)."""
    if not outcome.ok:
        return StageWork(outcome)
    try:
        return StageWork(outcome, evaluator.score(outcome.checkpoint, "validation", node_dir))
    except (FrozenFileError, CheckpointError, ContractError) as exc:
        return StageWork(outcome, refusal=exc)


def metrics_breach(records: list[dict], footer: dict[str, str]) -> str | None:
    """Why a finished stage's per-step metrics contradict the template contract, if they do.

    Diagnosis, the curves and the global step axis all read metrics.jsonl; a stage that
    trained but logged nothing (or logged steps it did not train) would be recorded as
    a healthy stage with no evidence.
    """
    logged = [int(r["step"]) for r in training_steps(records) if isinstance(r.get("step"), (int, float))]
    try:
        trained = int(float(footer.get("steps", "")))
    except ValueError:
        trained = None
    if not logged:
        said = f" although its footer says {trained} steps" if trained else ""
        return (f"train.py logged no per-step metrics to metrics_path{said}; the template contract needs one "
                "JSON line per logged step with 'step' (docs/templates.md)")
    if trained is not None and max(logged) > trained:
        return f"train.py logged step {max(logged)} but its footer says it trained {trained} steps"
    return None


def discard_attempt(tail: MetricsTail, checkpoint: Path) -> None:
    """Remove what an earlier attempt of the stage wrote (its metrics, a checkpoint it may
    have half-saved), so a stage trained again is judged on its own output only."""
    tail.restart()
    shutil.rmtree(checkpoint, ignore_errors=True)


class StageRunner:
    """Launches ``train.py`` from the workspace for one node."""

    def __init__(self, workspace: Path, sandbox: Sandbox, guard: FrozenGuard | None = None,
                 pristine_env: Path | None = None):
        self.workspace = workspace
        self.sandbox = sandbox
        self.guard = guard
        self.pristine_env = pristine_env

    def run(self, spec: TrialSpec, node_dir: Path, on_step: Callable[[dict], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> StageOutcome:
        node_dir.mkdir(parents=True, exist_ok=True)
        spec_path = spec.write(node_dir / "spec.json")
        tail, clock = MetricsTail(Path(spec.metrics_path)), StageClock()
        checkpoint = Path(spec.output_dir) / "checkpoint"
        discard_attempt(tail, checkpoint)  # a stage cut short by a stop trains again from nothing

        def poll() -> None:
            faults.point("launched")
            if should_stop and should_stop():
                raise KeyboardInterrupt  # the executor kills the trial on the way out
            for record in tail.read_new():
                clock.saw(record)
                if on_step:
                    on_step(record)

        def retry() -> None:  # the warm worker was lost: the cold retry starts from nothing
            discard_attempt(tail, checkpoint)
            clock.first_step = clock.trained = clock.train_runtime = None

        argv = [sys.executable, str(self.workspace / "train.py"), "--spec", str(spec_path)]
        mounts = Mounts(read_only=[self.workspace, Path(spec.init_checkpoint)], writable=[node_dir])
        clock.launch()
        result = run_guarded(self.sandbox, self.guard, self.pristine_env, argv, cwd=node_dir,
                             wall_seconds=spec.wall_seconds, env=scrubbed_env(node_dir), mounts=mounts, on_poll=poll,
                             on_retry=retry)
        clock.exit()
        reason = result.failure_reason(spec.wall_seconds)
        if reason is None and not result.footer:
            reason = "no result footer: train.py ended without printing '---' and its key: value lines"
        elif reason is None and not checkpoint.is_dir():
            reason = f"train.py finished but wrote no checkpoint at {checkpoint}"
        breach = reason is None and (reason := metrics_breach(tail.records, result.footer)) is not None
        return StageOutcome(result, tail.records, checkpoint if reason is None else None, reason, clock.timing(),
                            breach)

    def finished_outcome(self, node_dir: Path) -> StageOutcome | None:
        """The outcome of a stage that ran to completion before the controller died, if it did."""
        stdout, checkpoint = node_dir / "stdout.log", node_dir / "checkpoint"
        footer = parse_footer(stdout.read_text(errors="replace")) if stdout.is_file() else {}
        if footer.get("status") != "ok" or not (checkpoint / "config.json").is_file():
            return None
        try:
            seconds = float(footer.get("seconds", 0.0))
        except ValueError:
            seconds = 0.0
        result = RunResult(0, False, seconds, stdout, node_dir / "stderr.log", footer, tier=self.sandbox.tier)
        return StageOutcome(result, read_records(node_dir / "metrics.jsonl"), checkpoint)
