"""Stages on a Ray cluster (``--executor ray``): one Ray job per stage attempt.

Each stage (training, then scoring on validation) is a Ray job running
``python -m autorl.stages.remote_stage`` on whichever node has the CPUs (and GPU) it asks for,
in the sandbox tier that node supports. Its submission id is stable per node attempt
(``autorl-<session run>-<node>-a<attempt>``), so the id is an idempotency key: a
controller killed with ``kill -9`` and resumed finds the job still running (or finished)
and follows it instead of training the stage again. Ray jobs outlive their submitter;
``Ctrl-C`` stops them.

The nodes share no folder with the controller or each other: a stage's inputs (the
session's workspace, the parent checkpoint, its task) and outputs (its checkpoint, logs,
result) cross the cluster through the session's MLflow artifact store (``job_files.py``),
its steps as a file the job uploads as it grows and the controller reads while it trains.
Nothing of a session is put in Ray's object store. Each node needs the same Python
environment at the same path, and a way to the artifact store (a tracking server's
artifact root, S3, GCS, Azure). A job whose node is lost mid-stage is submitted again
(``-r1``, ``-r2``: another node takes it); only a job's result file makes what it sent a
result, so a lost job's half-sent files are never taken.

Without ``--ray-address`` autorl uses the Ray head on this machine (``autorl server up
--ray`` starts one), starting it when none answers.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from autorl.analysis.curves import read_records
from autorl.errors import ConfigError, SessionError
from autorl.stages import remote_stage
from autorl.stages.job_files import COMPLETE, RunFiles, whole_lines
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageWork

LOCAL_ADDRESS = "http://127.0.0.1:8265"
HEAD_PORT = 6380
GCS_PORT = 6379  # Ray's default for a head started elsewhere
POLL_S = 0.2
METRICS_POLL_S = 1.0  # how often the controller reads a running job's uploaded steps
PENDING_CHECK_S = 30.0  # a job pending this long is checked: can any live node still host it?
START_TIMEOUT_S = 120.0
# a loopback head must stay on 127.0.0.1, and auth must be said explicitly on every side
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def ray_environment() -> None:
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)


def answers(address: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{address}/api/version", timeout=timeout) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_local_head(cpus: int | None = None, gpus: int | None = None) -> str:
    """Start a Ray head on this machine (loopback only) unless one answers; its address."""
    ray_environment()
    if answers(LOCAL_ADDRESS):
        return LOCAL_ADDRESS
    argv = [ray_command(), "start", "--head", f"--port={HEAD_PORT}", "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1", "--dashboard-port=8265", "--disable-usage-stats"]
    argv += [f"--num-cpus={cpus}"] if cpus else []
    argv += [f"--num-gpus={gpus}"] if gpus is not None else []
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=START_TIMEOUT_S)
    if done.returncode != 0:
        raise ConfigError(f"could not start a local Ray head: {(done.stderr or done.stdout).strip()[-400:]}")
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(LOCAL_ADDRESS):
        if time.monotonic() > deadline:
            raise ConfigError(f"the local Ray head started but its dashboard never answered at {LOCAL_ADDRESS}")
        time.sleep(0.5)
    return LOCAL_ADDRESS


def ray_command() -> str:
    """Ray's CLI: the one beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray") or "ray"


def stop_local_head() -> None:
    subprocess.run([ray_command(), "stop"], capture_output=True, text=True, env={**os.environ, **RAY_ENV}, timeout=120)


def dashboard_address(address: str) -> str:
    """``ray://host:10001`` and ``host:port`` forms are not the Jobs API; say what is."""
    if not address.startswith(("http://", "https://")):
        raise ConfigError(f"--ray-address {address!r}: give the cluster's dashboard URL, e.g. http://head:8265")
    return address.rstrip("/")


def reach(address: str | None) -> str:
    """The cluster's dashboard address once it answers: ``address``, or without one the Ray
    head on this machine (started when none answers). A ConfigError says what to do."""
    if address is None:
        return start_local_head()
    address = dashboard_address(address)
    if not answers(address):
        raise ConfigError(f"--ray-address: no Ray cluster answers at {address}; start one (`autorl server up --ray`, "
                          "or `ray start --head` on the cluster) or leave out --ray-address")
    return address


MAX_NODE_RETRIES = 2  # a stage whose node was lost trains again elsewhere, this many times


class RayStages:
    """Submits stages to a Ray cluster, their files through the session's artifact store
    (``job_files.py``), and follows them until they end."""

    def __init__(self, address: str | None, session_key: str, session_task: dict, session_dir: Path,
                 tracking_uri: str, artifact_uri: Callable[[str], str], session_run_id: str,
                 cpus: float = 1.0, want_gpu: bool = True, notify: Callable[[str], None] = lambda text: None):
        ray_environment()
        from ray.job_submission import JobSubmissionClient

        self.address = reach(address)
        self.client = JobSubmissionClient(self.address)
        self.session_key = session_key
        self.tracking_uri = tracking_uri
        self.artifact_uri = artifact_uri
        self.session_files = RunFiles(artifact_uri(session_run_id), tracking_uri)
        self.session_task = {**session_task, "session_key": session_key,
                             "session_artifacts": self.session_files.artifact_uri}
        self.session_dir = session_dir
        self.cpus = cpus
        self.gpus = 1 if want_gpu and cluster_gpus(self.address) else 0
        self.notify = notify
        if self.address != LOCAL_ADDRESS and local_folder(self.session_files.artifact_uri):
            notify(f"the session's artifact store is a folder on this machine ({self.session_files.artifact_uri}): "
                   "Ray nodes elsewhere reach it only where they mount it at the same path; a cluster wants a "
                   "tracking server whose artifact root every node reaches (`autorl server up`, --tracking-uri)")

    def describe(self) -> str:
        gpu = f", {self.gpus} GPU" if self.gpus else ""
        return (f"stages run as Ray jobs on {self.address} ({self.cpus:g} CPU{gpu} each; files through the "
                "session's artifact store)")

    def close(self) -> None:
        """Nothing of the session is in the cluster's object store: nothing to free."""

    def submission_id(self, node_id: str, attempt: int, retry: int = 0) -> str:
        return f"autorl-{self.session_key}-{node_id}-a{attempt}" + (f"-r{retry}" if retry else "")

    def latest(self, node_id: str, attempt: int) -> tuple[int, str | None]:
        """The last job submitted for a node attempt (its retry number) and its state."""
        retry, state = 0, self.status(self.submission_id(node_id, attempt))
        while retry < MAX_NODE_RETRIES:
            later = self.status(self.submission_id(node_id, attempt, retry + 1))
            if later is None:
                break
            retry, state = retry + 1, later
        return retry, state

    def status(self, submission_id: str) -> str | None:
        """The job's state (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), None when unknown.
        A cluster that stops answering stops the session (resumable: its jobs may still run)."""
        try:
            return str(self.client.get_job_status(submission_id).value)
        except RuntimeError:  # the Jobs API says "does not exist" this way
            return None
        except Exception as exc:  # noqa: BLE001 - requests' connection errors, an HTTP 5xx
            raise SessionError(f"the Ray cluster at {self.address} stopped answering ({type(exc).__name__}); its "
                               "jobs may still be running: `autorl resume` follows them once it answers") from exc

    def run(self, attempt: int, spec: TrialSpec, run_id: str, on_step: Callable[[dict], None],
            should_stop: Callable[[], bool]) -> StageWork:
        """Submit the stage (unless its job already exists: then follow it) and wait for its
        result. A job whose node was lost is submitted again (another node takes it); a job
        that ended without a result for another reason fails the stage."""
        Path(spec.output_dir).mkdir(parents=True, exist_ok=True)  # the controller's folder of the node
        files = RunFiles(self.artifact_uri(run_id), self.tracking_uri)
        retry, state = self.latest(spec.node_id, attempt)
        if state is None and (missing := self.unplaceable()) is not None:
            return StageWork(StageOutcome(None, reason=missing))
        lost: list[str] = []
        while True:
            job = self.submission_id(spec.node_id, attempt, retry)
            if state is None:
                self.submit(job, spec, files)
            work = self.follow(job, files, Path(spec.output_dir), on_step, should_stop)
            if work is not None:
                return self.noted(work, lost)
            node = self.lost_node(job)
            if node is None or retry >= MAX_NODE_RETRIES:
                return StageWork(StageOutcome(None, reason="its Ray job ended without a result (stopped, or its "
                                                           f"node was lost); see the job's log: {self.log_tail(job)}"))
            lost.append(node)
            if (missing := self.unplaceable()) is not None:  # the node lost was the only one that could host it
                return StageWork(StageOutcome(None, reason=f"Ray node {node[:8]} was lost mid-stage and {missing}"))
            self.notify(f"{spec.node_id}: Ray node {node[:8]} was lost mid-stage: the stage trains again on another "
                        "node")
            retry, state = retry + 1, None

    def unplaceable(self) -> str | None:
        """Why no live node of the cluster can take a stage (None: one can). Ray would keep
        such a job pending forever; the stage fails at once and says what it asked for."""
        nodes = alive_resources(self.address)
        if nodes is None or any(n.get("CPU", 0) >= self.cpus and n.get("GPU", 0) >= self.gpus for n in nodes):
            return None
        largest = max((n.get("CPU", 0) for n in nodes), default=0)
        gpu = f" and {self.gpus} GPU" if self.gpus else ""
        return (f"no node of the cluster has {self.cpus:g} CPUs{gpu} free to give a stage (the largest has "
                f"{largest:g} CPUs): lower --trial-cpus, or add a node that has them")

    @staticmethod
    def noted(work: StageWork, lost: list[str]) -> StageWork:
        """The tree says where the stage ran, and which nodes it lost on the way."""
        result = work.outcome.result
        if result is not None and lost:
            result.notes.append(f"retried after losing Ray node{'s' * (len(lost) > 1)} "
                                f"{', '.join(n[:8] for n in lost)}")
            result.worker += f"; retried after node loss ({len(lost)})"
        return work

    def outlived_stop(self, node_id: str, attempt: int, run_id: str) -> bool:
        """Whether the node's stage still runs as a Ray job, or ran to its end, after the
        controller stopped: then a resume follows the job instead of training again."""
        retry, state = self.latest(node_id, attempt)
        job = self.submission_id(node_id, attempt, retry)
        return state in ("PENDING", "RUNNING") or (
            state == "SUCCEEDED" and RunFiles(self.artifact_uri(run_id), self.tracking_uri).exists(
                f"jobs/{job}/{remote_stage.RESULT_FILE}"))

    def submit(self, job: str, spec: TrialSpec, files: RunFiles) -> None:
        """Put the stage's task in its run's artifacts (the workspace once per session in the
        session run's) and start its job."""
        workspace = Path(self.session_task["workspace"])
        self.share_workspace(workspace)
        # the controller checks the node's train.py out before it starts the stage, and
        # starts a stage with another train.py only once the running ones have ended
        spec = self.addressable(spec, files, job)
        task = remote_stage.stage_task(self.session_task, spec, (workspace / "train.py").read_text(),
                                       self.session_dir)
        files.delete(f"jobs/{job}")  # what an earlier submission of the same id left
        files.put_text(json.dumps(task), f"jobs/{job}/task.json")
        self.client.submit_job(
            entrypoint=shlex.join([sys.executable, "-m", "autorl.stages.remote_stage", self.tracking_uri,
                                   files.artifact_uri, job]),
            submission_id=job,
            entrypoint_num_cpus=self.cpus,
            entrypoint_num_gpus=self.gpus or None,
            runtime_env={"env_vars": dict(RAY_ENV)},
            metadata={"autorl.session": self.session_key},
        )

    def share_workspace(self, workspace: Path) -> None:
        """The session's workspace (frozen env, base model, data) in the session run's
        artifacts, once per session; a node fetches it once."""
        folder = f"stage_workspace/{self.session_task['workspace_digest']}"
        if not self.session_files.exists(f"{folder}/{COMPLETE}"):
            self.session_files.put_folder(workspace, folder, skip=remote_stage.NOT_SHIPPED)

    def addressable(self, spec: TrialSpec, files: RunFiles, job: str) -> TrialSpec:
        """A start a node can fetch: the base model (in the workspace every node has) or an
        artifact store's address; a checkpoint of an older record, in the session folder
        rather than the store, is sent beside the task first."""
        start, workspace = spec.init_checkpoint, Path(self.session_task["workspace"])
        if remote_stage.is_address(start) or Path(start).is_relative_to(workspace):
            return spec
        files.repository.log_artifacts(start, f"jobs/{job}/parent")
        return spec.model_copy(update={"init_checkpoint": files.uri(f"jobs/{job}/parent")})

    def follow(self, job: str, files: RunFiles, node_dir: Path, on_step: Callable[[dict], None],
               should_stop: Callable[[], bool]) -> StageWork | None:
        """Hear the job's steps until it ends; then take its result from the artifact store."""
        heard, mirror = 0, node_dir / "metrics.jsonl"
        mirror.unlink(missing_ok=True)  # this job's steps only: a lost job's are not the stage's
        pending_since, read_at = time.monotonic(), 0.0
        while True:
            if should_stop():
                self.stop(job)
                raise KeyboardInterrupt
            state = self.status(job)
            ended = state in TERMINAL or state is None
            if ended or time.monotonic() - read_at >= METRICS_POLL_S:
                heard += self.hear(files, job, heard, mirror, on_step)
                read_at = time.monotonic()
            if ended:
                break
            if state != "PENDING":
                pending_since = time.monotonic()
            elif time.monotonic() - pending_since > PENDING_CHECK_S:
                if (missing := self.unplaceable()) is not None:  # nodes left since it was submitted
                    self.stop(job)
                    return StageWork(StageOutcome(None, reason=f"its Ray job waited to be placed and {missing}"))
                pending_since = time.monotonic()
            time.sleep(POLL_S)
        return self.take_result(job, files, node_dir, state)

    @staticmethod
    def hear(files: RunFiles, job: str, heard: int, mirror: Path, on_step: Callable[[dict], None]) -> int:
        """The steps the job has uploaded since the ``heard`` first; how many were new."""
        lines = whole_lines(files.get_text(f"jobs/{job}/metrics.jsonl"))[heard:]
        if lines:  # mirrored where a local stage writes them, for whoever tails the node's folder
            with mirror.open("a") as handle:
                handle.write("".join(line + "\n" for line in lines))
        for line in lines:
            on_step(json.loads(line))
        return len(lines)

    def take_result(self, job: str, files: RunFiles, node_dir: Path, state: str | None) -> StageWork | None:
        """The job's node folder, once its result file says it is whole (None: it has none)."""
        text = files.get_text(f"jobs/{job}/{remote_stage.RESULT_FILE}")
        scratch = node_dir.with_name(node_dir.name + ".job")
        if text is None or not files.get_folder(f"jobs/{job}/out", scratch):
            self.notify(f"Ray job {job} ended {state or 'unknown'} without a result: {self.log_tail(job)}")
            return None
        for entry in scratch.iterdir():
            target = node_dir / entry.name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            entry.rename(target)
        shutil.rmtree(scratch, ignore_errors=True)
        (node_dir / remote_stage.RESULT_FILE).write_text(text)
        work = remote_stage.decode(json.loads(text), read_records(node_dir / "metrics.jsonl"), node_dir)
        node = self.job_node(job)
        if work.outcome.result is not None and node:
            work.outcome.result.worker = f"{work.outcome.result.worker} on Ray node {node[:8]}"
        return work

    def job_node(self, job: str) -> str | None:
        """The node whose resources the job's entrypoint took (None when Ray forgot the job)."""
        try:
            return self.client.get_job_info(job).driver_node_id or None
        except Exception:  # noqa: BLE001 - a job Ray forgot: nothing to say about its node
            return None

    def lost_node(self, job: str) -> str | None:
        """The node a job ran on, when the cluster has lost it (None: the node is alive or unknown)."""
        node = self.job_node(job)
        return node if node and node in dead_nodes(self.address) else None

    def stop(self, submission_id: str) -> None:
        """Stop a job and wait (briefly) until Ray says it stopped: its processes are killed."""
        try:
            self.client.stop_job(submission_id)
        except RuntimeError:
            return
        deadline = time.monotonic() + 30
        while self.status(submission_id) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def log_tail(self, submission_id: str) -> str:
        try:
            return " | ".join(self.client.get_job_logs(submission_id).strip().splitlines()[-3:])[-400:]
        except RuntimeError:
            return "no log"


def local_folder(artifact_uri: str) -> bool:
    """Whether an artifact URI is a folder of this machine's (``file:``, or a bare path)."""
    return artifact_uri.startswith(("file:", "/"))


def alive_resources(address: str) -> list[dict] | None:
    """Each live node's total resources (None when the state API does not answer)."""
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - an old or locked-down dashboard: let Ray place the job
        return None
    return [dict(node.resources_total or {}) for node in nodes]


def dead_nodes(address: str) -> set[str]:
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=address, filters=[("state", "=", "DEAD")], raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - the state API is down: say nothing was lost
        return set()
    return {node.node_id for node in nodes}


def cluster_gpus(address: str) -> int:
    """GPUs the cluster's live nodes offer in all (0 when the state API does not say)."""
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - an old or locked-down dashboard: ask for no GPU rather than fail
        return 0
    return int(sum(float((node.resources_total or {}).get("GPU", 0)) for node in nodes))
