"""One stage on a cluster node: train, then score on validation, as the local controller would.

``python -m autorl.stages.remote_stage TASK.json`` is what a Ray job runs (``autorl/stages/ray_stages.py``).
It uses the strongest sandbox tier the node supports (and, unless the session said
``--workers cold``, one warm worker for the job's two runs), checks the frozen files against the
hashes the session recorded when it started (not against what it finds on the node), and
writes everything to the node's folder, which the controller reads over shared storage:
metrics.jsonl while training (the controller tails it), then ``stage_result.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from autorl.errors import CheckpointError, ContractError, FrozenFileError
from autorl.stages.evaluate import EvalResult, FrozenEvaluator
from autorl.stages.frozen import FrozenGuard
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageRunner, StageWork, score_trained
from sandbox import Limits, RunResult, WorkerPlan, choose_sandbox

RESULT_FILE = "stage_result.json"
TASK_FILE = "ray_task.json"
REFUSALS = {cls.__name__: cls for cls in (FrozenFileError, CheckpointError, ContractError)}


def session_task(workspace: Path, frozen_hashes: Path, sandbox: str, limits: Limits, pristine_env: Path | None,
                 plan: WorkerPlan | None) -> dict:
    """What every stage's job of a session needs; every path must be reachable from the
    node. With a worker ``plan`` a job imports the training stack once for both its runs."""
    return {"workspace": str(workspace), "frozen_hashes": str(frozen_hashes), "sandbox": sandbox,
            "limits": dataclasses.asdict(limits), "pristine_env": str(pristine_env) if pristine_env else None,
            "worker_plan": json.loads(json.dumps(dataclasses.asdict(plan), default=str)) if plan else None}


def stage_task(session: dict, spec: TrialSpec) -> dict:
    """The session's task for one stage: its spec, and its own worker home in its folder."""
    plan = session["worker_plan"] and {**session["worker_plan"], "home": str(Path(spec.output_dir) / "worker")}
    return {**session, "spec": spec.model_dump(mode="json"), "worker_plan": plan}


def plan_from(data: dict) -> WorkerPlan:
    paths = {key: [Path(p) for p in data[key]] for key in ("allowed_roots", "hidden_roots", "visible", "watch")}
    return WorkerPlan(preload=data["preload"], home=Path(data["home"]), **paths)


def run_task(data: dict) -> StageWork:
    workspace = Path(data["workspace"])
    spec = TrialSpec.model_validate(data["spec"])
    node_dir = Path(spec.output_dir)
    pristine = Path(data["pristine_env"]) if data.get("pristine_env") else None
    pristine = pristine if pristine is not None and pristine.is_dir() else None
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # the GPU Ray gave this job, if it asked for one
    sandbox = choose_sandbox(data["sandbox"], Limits(**data["limits"]), gpus=[g for g in gpu.split(",") if g][:1])
    guard = FrozenGuard(workspace / "env", json.loads(Path(data["frozen_hashes"]).read_text()))
    if data.get("worker_plan"):
        sandbox.start_worker(plan_from(data["worker_plan"]))  # imports while the run is set up
    try:
        outcome = StageRunner(workspace, sandbox, guard, pristine_env=pristine).run(spec, node_dir)
        return score_trained(FrozenEvaluator(workspace, guard, sandbox, pristine_env=pristine), outcome, node_dir)
    finally:
        sandbox.stop_worker()


# -- the result file --------------------------------------------------------------------------

def encode(work: StageWork) -> dict:
    outcome = work.outcome
    return {
        "run": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(outcome.result).items()},
        "checkpoint": str(outcome.checkpoint) if outcome.checkpoint else None,
        "reason": outcome.reason, "timing": outcome.timing, "breach": outcome.breach,
        "evaluation": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(work.evaluation).items()}
        if work.evaluation else None,
        "refusal": [type(work.refusal).__name__, str(work.refusal)] if work.refusal else None,
    }


def decode(data: dict, records: list[dict]) -> StageWork:
    run = data["run"]
    result = RunResult(**{**run, "stdout_path": Path(run["stdout_path"]), "stderr_path": Path(run["stderr_path"])})
    outcome = StageOutcome(result, records, Path(data["checkpoint"]) if data["checkpoint"] else None,
                           data["reason"], data["timing"], data["breach"])
    evaluation = None
    if data["evaluation"]:
        evaluation = EvalResult(**{**data["evaluation"], "path": Path(data["evaluation"]["path"])})
    refusal = REFUSALS[data["refusal"][0]](data["refusal"][1]) if data["refusal"] else None
    return StageWork(outcome, evaluation, refusal)


def main(argv: list[str] | None = None) -> int:
    task_path = Path((argv or sys.argv[1:])[0])
    work = run_task(json.loads(task_path.read_text()))
    out = task_path.parent / RESULT_FILE
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(encode(work), indent=1))
    partial.replace(out)  # whole or absent: a controller never reads half a result
    return 0


if __name__ == "__main__":
    sys.exit(main())
