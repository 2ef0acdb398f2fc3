"""One stage on a cluster node: train, then score on validation, as the local controller would.

``python -m autorl.stages.remote_stage STASH KEY`` is what a Ray job runs
(``autorl/stages/ray_stages.py``). The node shares no folder with the controller: the job
takes its task, the session's workspace (once per node) and the parent checkpoint from
the session's stash in Ray's object store (``autorl/stages/ray_files.py``), works in a
folder of its own node, sends each training step back as it is logged, and puts its
whole node folder (checkpoint, metrics, logs, ``stage_result.json``) back in the stash.

It uses the strongest sandbox tier the node supports (and, unless the session said
``--workers cold``, one warm worker for the job's two runs) and checks the frozen files
against the hashes the session recorded when it started, not against what it finds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from autorl.errors import CheckpointError, ContractError, FrozenFileError
from autorl.stages.evaluate import EvalResult, FrozenEvaluator
from autorl.stages.frozen import FrozenGuard
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageRunner, StageWork, score_trained
from sandbox import Limits, RunResult, WorkerPlan, choose_sandbox

RESULT_FILE = "stage_result.json"
REFUSALS = {cls.__name__: cls for cls in (FrozenFileError, CheckpointError, ContractError)}
NOT_SHIPPED = (".git", "__pycache__")


# -- on the controller: what a stage's job is given --------------------------------------------

def session_task(workspace: Path, frozen_hashes: Path, sandbox: str, limits: Limits,
                 plan: WorkerPlan | None) -> dict:
    """What every stage's job of a session needs, in the controller's own paths (the job
    moves them to its node: ``relocate``)."""
    hashes = json.loads(frozen_hashes.read_text())
    return {"workspace": str(workspace), "frozen_hashes": hashes, "sandbox": sandbox,
            "limits": dataclasses.asdict(limits),
            "workspace_digest": hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:16],
            "worker_plan": json.loads(json.dumps(dataclasses.asdict(plan), default=str)) if plan else None}


def stage_task(session: dict, spec: TrialSpec, train_py: str, session_dir: Path) -> dict:
    """One stage's task: the spec, the train.py it runs, where its starting checkpoint comes
    from (a path inside the workspace, or the parent's checkpoint shipped beside the task)."""
    workspace, init = Path(session["workspace"]), Path(spec.init_checkpoint)
    start = {"workspace": str(init.relative_to(workspace))} if init.is_relative_to(workspace) else {"shipped": True}
    return {**session, "spec": spec.model_dump(mode="json"), "train_py": train_py, "start": start,
            "session_dir": str(session_dir)}


# -- on the node --------------------------------------------------------------------------------

def relocate(value, moves: dict[str, str]):
    """``value`` with every path string under a key of ``moves`` moved under its value."""
    if isinstance(value, str):
        for old, new in moves.items():
            if value == old or value.startswith(old.rstrip("/") + "/"):
                return new + value[len(old):]
        return value
    if isinstance(value, list):
        return [relocate(v, moves) for v in value]
    if isinstance(value, dict):
        return {k: relocate(v, moves) for k, v in value.items()}
    return value


def plan_from(data: dict) -> WorkerPlan:
    paths = {key: [Path(p) for p in data[key]] for key in ("allowed_roots", "hidden_roots", "visible", "watch")}
    return WorkerPlan(preload=data["preload"], home=Path(data["home"]), **paths)


def cached_workspace(fetch, root: Path, digest: str) -> Path:
    """The session's workspace on this node, fetched once per node and kept read-only: the
    pristine copy the frozen guard restores from, and what each stage's copy links to."""
    cache = root / f"workspace-{digest}"
    if (cache / ".complete").is_file():
        return cache
    partial = root / f"workspace-{digest}.partial-{os.getpid()}"
    fetch(partial)
    for path in partial.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    (partial / ".complete").touch()
    try:
        partial.rename(cache)
    except OSError:  # another job of the session fetched it first
        shutil.rmtree(partial, ignore_errors=True)
    return cache


def stage_workspace(cache: Path, folder: Path, train_py: str) -> Path:
    """The stage's own workspace: the cached one, linked file by file, with its train.py."""
    workspace = folder / "workspace"
    shutil.copytree(cache, workspace, copy_function=os.link, ignore=shutil.ignore_patterns(".complete"))
    script = workspace / "train.py"
    script.unlink(missing_ok=True)
    script.write_text(train_py)
    return workspace


def run_stage(data: dict, workspace: Path, pristine: Path, init: Path, node_dir: Path, on_step) -> StageWork:
    """Train and score, as the controller's local executor would, in this node's paths."""
    spec = TrialSpec.model_validate({**data["spec"], "init_checkpoint": str(init), "output_dir": str(node_dir),
                                     "metrics_path": str(node_dir / "metrics.jsonl")})
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "")  # the GPU Ray gave this job, if it asked for one
    sandbox = choose_sandbox(data["sandbox"], Limits(**data["limits"]), gpus=[g for g in gpu.split(",") if g][:1])
    guard = FrozenGuard(workspace / "env", data["frozen_hashes"])
    if data.get("worker_plan"):
        plan = relocate(data["worker_plan"], {data["workspace"]: str(workspace),
                                              data["session_dir"]: str(node_dir.parent)})
        sandbox.start_worker(plan_from({**plan, "home": str(node_dir / "worker")}))
    try:
        outcome = StageRunner(workspace, sandbox, guard, pristine_env=pristine).run(spec, node_dir, on_step=on_step)
        return score_trained(FrozenEvaluator(workspace, guard, sandbox, pristine_env=pristine), outcome, node_dir)
    finally:
        sandbox.stop_worker()


def main(argv: list[str] | None = None) -> int:
    import ray

    from autorl.stages import ray_files

    stash_name, key = (argv or sys.argv[1:])[:2]
    ray.init(namespace=ray_files.NAMESPACE, log_to_driver=False)  # the cluster this job runs on
    stash = ray.get_actor(stash_name, namespace=ray_files.NAMESPACE)
    data = json.loads(ray_files.get_blob(stash, f"{key}/task"))
    root = ray_files.node_folder() / stash_name
    folder = root / "stages" / key
    shutil.rmtree(folder, ignore_errors=True)  # a job retried on this node starts clean
    folder.mkdir(parents=True)
    cache = cached_workspace(lambda dest: ray_files.unpack(ray_files.get_blob(stash, data["workspace_key"]), dest),
                             root, data["workspace_digest"])
    workspace = stage_workspace(cache, folder, data["train_py"])
    if "workspace" in data["start"]:
        init = workspace / data["start"]["workspace"]
    else:
        ray_files.unpack(ray_files.get_blob(stash, f"{key}/parent"), folder / "parent")
        init = folder / "parent"
    node_dir = folder / data["spec"]["node_id"]  # as the controller names it (nodes/<id>)

    def on_step(record: dict) -> None:
        stash.append.remote(f"{key}/metrics", [json.dumps(record)])  # in order: one caller, one actor

    work = run_stage(data, workspace, cache / "env", init, node_dir, on_step)
    (node_dir / RESULT_FILE).write_text(json.dumps(encode(work, node_dir), indent=1))
    ray_files.put_blob(stash, f"{key}/out", ray_files.pack({".": node_dir}, skip=("worker",)))
    shutil.rmtree(folder, ignore_errors=True)
    return 0


# -- the result file --------------------------------------------------------------------------

def _relative(value, node_dir: Path):
    if isinstance(value, Path):
        return str(value.relative_to(node_dir)) if value.is_relative_to(node_dir) else str(value)
    return value


def encode(work: StageWork, node_dir: Path) -> dict:
    """The stage's result with its paths relative to its node folder (the controller's differs)."""
    outcome = work.outcome
    evaluation = dataclasses.asdict(work.evaluation) if work.evaluation else None
    return {
        "run": {k: _relative(v, node_dir) for k, v in dataclasses.asdict(outcome.result).items()},
        "checkpoint": _relative(outcome.checkpoint, node_dir) if outcome.checkpoint else None,
        "reason": outcome.reason, "timing": outcome.timing, "breach": outcome.breach,
        "evaluation": {k: _relative(v, node_dir) for k, v in evaluation.items()} if evaluation else None,
        "refusal": [type(work.refusal).__name__, str(work.refusal)] if work.refusal else None,
    }


def decode(data: dict, records: list[dict], node_dir: Path) -> StageWork:
    run = data["run"]
    result = RunResult(**{**run, "stdout_path": node_dir / run["stdout_path"],
                          "stderr_path": node_dir / run["stderr_path"]})
    outcome = StageOutcome(result, records, node_dir / data["checkpoint"] if data["checkpoint"] else None,
                           data["reason"], data["timing"], data["breach"])
    evaluation = None
    if data["evaluation"]:
        evaluation = EvalResult(**{**data["evaluation"], "path": node_dir / data["evaluation"]["path"]})
    refusal = REFUSALS[data["refusal"][0]](data["refusal"][1]) if data["refusal"] else None
    return StageWork(outcome, evaluation, refusal)


if __name__ == "__main__":
    sys.exit(main())
