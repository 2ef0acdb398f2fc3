"""One stage on a cluster node: train, then score on validation, as the local controller would.

``python -m autorl.stages.remote_stage TRACKING_URI ARTIFACT_URI JOB`` is what a Ray job
runs (``autorl/stages/ray_stages.py``). The node shares no folder with the controller: the
job reads its task from its node run's artifacts, the session's workspace (once per node)
and the parent checkpoint from the session's artifact store (``autorl/stages/job_files.py``),
works in a folder of its own node, uploads its steps as they come, and at the end its
checkpoint, its logs and evaluation, and last ``stage_result.json``.

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
import threading
from pathlib import Path

from autorl.errors import CheckpointError, ContractError, FrozenFileError
from autorl.stages.evaluate import EvalResult, FrozenEvaluator
from autorl.stages.frozen import FrozenGuard
from autorl.stages.job_files import RunFiles, download_uri, node_folder
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
    from (a path inside the workspace, or an address in the artifact store)."""
    workspace, init = Path(session["workspace"]), spec.init_checkpoint
    inside = not is_address(init) and Path(init).is_relative_to(workspace)
    start = {"workspace": str(Path(init).relative_to(workspace))} if inside else {"address": init}
    return {**session, "spec": spec.model_dump(mode="json"), "train_py": train_py, "start": start,
            "session_dir": str(session_dir)}


def is_address(location: str) -> bool:
    """``s3://…``, ``file:///…``, ``mlflow-artifacts:/…``: an artifact store's, not a path."""
    return ":" in location.split("/", 1)[0]


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
    tracking_uri, artifact_uri, job = (argv or sys.argv[1:])[:3]
    files = RunFiles(artifact_uri, tracking_uri)
    data = json.loads(files.get_text(f"jobs/{job}/task.json") or "null")
    if data is None:
        raise SystemExit(f"no task for job {job} at {files.uri('jobs')}: is the artifact store reachable from here?")
    root = node_folder() / data["session_key"]
    folder = root / "stages" / job
    shutil.rmtree(folder, ignore_errors=True)  # a job retried on this node starts clean
    folder.mkdir(parents=True)
    session = RunFiles(data["session_artifacts"], tracking_uri)
    cache = cached_workspace(lambda dest: fetch_workspace(session, data["workspace_digest"], dest), root,
                             data["workspace_digest"])
    workspace = stage_workspace(cache, folder, data["train_py"])
    init = start_checkpoint(data, workspace, folder, tracking_uri)
    node_dir = folder / data["spec"]["node_id"]  # as the controller names it (nodes/<id>)
    node_dir.mkdir()
    with StepUploads(files, node_dir / "metrics.jsonl", f"jobs/{job}"):
        work = run_stage(data, workspace, cache / "env", init, node_dir, on_step=lambda record: None)
    send_result(files, job, work, node_dir)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


def fetch_workspace(session: RunFiles, digest: str, dest: Path) -> None:
    if not session.get_folder(f"stage_workspace/{digest}", dest):
        raise SystemExit(f"the session's workspace is not whole at {session.uri('stage_workspace')}")


def start_checkpoint(data: dict, workspace: Path, folder: Path, tracking_uri: str) -> Path:
    """The stage's starting weights on this node: the base model in the workspace, or the
    parent's checkpoint fetched from the artifact store (file by file)."""
    if "workspace" in data["start"]:
        return workspace / data["start"]["workspace"]
    try:
        return download_uri(data["start"]["address"], folder / "parent", tracking_uri)
    except Exception as exc:  # noqa: BLE001 - every store raises its own kinds
        raise SystemExit(f"cannot fetch the parent checkpoint {data['start']['address']}: {exc}") from exc


def send_result(files: RunFiles, job: str, work: StageWork, node_dir: Path) -> None:
    """The checkpoint (when the stage was scored) to the node run's ``checkpoint/``, the node
    folder's small files, and last the result file that makes them the stage's result."""
    outcome, stored = work.outcome, False
    if outcome.checkpoint and work.evaluation is not None and work.refusal is None:
        files.delete("checkpoint")  # what a lost attempt of this stage may have left half-sent
        files.repository.log_artifacts(str(outcome.checkpoint), "checkpoint")
        stored = True
    files.put_folder(node_dir, f"jobs/{job}/out", skip=("worker", "checkpoint"))
    (node_dir / RESULT_FILE).write_text(json.dumps({**encode(work, node_dir), "checkpoint_stored": stored}, indent=1))
    files.repository.log_artifact(str(node_dir / RESULT_FILE), f"jobs/{job}")


class StepUploads:
    """Uploads the stage's metrics file while it grows (every ``period`` seconds when it has
    changed), and once more at the end: the controller hears the steps as they come."""

    def __init__(self, files: RunFiles, path: Path, folder: str, period: float = 1.0):
        self.files, self.path, self.folder, self.period = files, path, folder, period
        self.done = threading.Event()
        self.sent_size = -1
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def __enter__(self) -> StepUploads:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.send()

    def loop(self) -> None:
        while not self.done.wait(self.period):
            try:
                self.send()
            except Exception:  # noqa: BLE001 - a store that hiccups: the next upload (or the last) catches up
                pass

    def send(self) -> None:
        size = self.path.stat().st_size if self.path.is_file() else -1
        if size != self.sent_size and size >= 0:
            self.files.repository.log_artifact(str(self.path), self.folder)
            self.sent_size = size


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
                           data["reason"], data["timing"], data["breach"], data.get("checkpoint_stored", False))
    evaluation = None
    if data["evaluation"]:
        evaluation = EvalResult(**{**data["evaluation"], "path": node_dir / data["evaluation"]["path"]})
    refusal = REFUSALS[data["refusal"][0]](data["refusal"][1]) if data["refusal"] else None
    return StageWork(outcome, evaluation, refusal)


if __name__ == "__main__":
    sys.exit(main())
