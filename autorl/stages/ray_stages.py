"""Stages on a Ray cluster (``--executor ray``): one Ray job per stage attempt.

Each stage (training, then scoring on validation) is a Ray job running
``python -m autorl.stages.remote_stage`` on whichever node has the CPUs (and GPU) it asks for,
in the sandbox tier that node supports. Its submission id is stable per node attempt
(``autorl-<session run>-<node>-a<attempt>``), so the id is an idempotency key: a
controller killed with ``kill -9`` and resumed finds the job still running (or finished)
and follows it instead of training the stage again. Ray jobs outlive their submitter;
``Ctrl-C`` stops them.

What the cluster needs: the session folder (workspace, checkpoints, node folders) on
storage every node reaches at the same path, and the same Python environment at the same
path on every node. Per-step metrics come back through that storage (the controller
tails ``metrics.jsonl``), the result as ``stage_result.json``.

Without ``--ray-address`` autorl uses the Ray head on this machine (``autorl server up
--ray`` starts one), starting it when none answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autorl.errors import ConfigError, SessionError
from autorl.stages import remote_stage
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import MetricsTail, StageOutcome, StageWork

LOCAL_ADDRESS = "http://127.0.0.1:8265"
HEAD_PORT = 6380
POLL_S = 0.2
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


@dataclass
class RayJob:
    submission_id: str
    node_dir: Path


class RayStages:
    """Submits stages to a Ray cluster and follows them until they end."""

    def __init__(self, address: str | None, session_key: str, session_task: dict, cpus: float = 1.0,
                 want_gpu: bool = True, notify: Callable[[str], None] = lambda text: None):
        ray_environment()
        from ray.job_submission import JobSubmissionClient

        self.address = reach(address)
        self.client = JobSubmissionClient(self.address)
        self.session_key = session_key
        self.session_task = session_task  # remote_stage.session_task: what every job of the session needs
        self.cpus = cpus
        self.gpus = 1 if want_gpu and cluster_gpus(self.address) else 0
        self.notify = notify

    def describe(self) -> str:
        gpu = f", {self.gpus} GPU" if self.gpus else ""
        return f"stages run as Ray jobs on {self.address} ({self.cpus:g} CPU{gpu} each)"

    def submission_id(self, node_id: str, attempt: int) -> str:
        return f"autorl-{self.session_key}-{node_id}-a{attempt}"

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

    def run(self, attempt: int, spec: TrialSpec, on_step: Callable[[dict], None],
            should_stop: Callable[[], bool]) -> StageWork:
        """Submit the stage (unless its job already exists: then follow it) and wait for its
        result; a job that ended without one (stopped, lost with its node) fails the stage."""
        job = RayJob(self.submission_id(spec.node_id, attempt), Path(spec.output_dir))
        if self.status(job.submission_id) is None:
            self.submit(job, remote_stage.stage_task(self.session_task, spec))
        work = self.follow(job, on_step, should_stop)
        return work or StageWork(StageOutcome(None, reason="its Ray job ended without a result (stopped, or its "
                                                           "node was lost); see the job's log"))

    def outlived_stop(self, node_id: str, attempt: int, node_dir: Path) -> bool:
        """Whether the node's stage still runs as a Ray job, or ran to its end, after the
        controller stopped: then a resume follows the job instead of training again."""
        state = self.status(self.submission_id(node_id, attempt))
        return state in ("PENDING", "RUNNING") or (
            state == "SUCCEEDED" and (node_dir / remote_stage.RESULT_FILE).is_file())

    def submit(self, job: RayJob, task: dict) -> None:
        job.node_dir.mkdir(parents=True, exist_ok=True)
        (job.node_dir / remote_stage.RESULT_FILE).unlink(missing_ok=True)
        task_path = job.node_dir / remote_stage.TASK_FILE
        task_path.write_text(json.dumps(task, indent=1))
        self.client.submit_job(
            entrypoint=f"{sys.executable} -m autorl.stages.remote_stage {task_path}",
            submission_id=job.submission_id,
            entrypoint_num_cpus=self.cpus,
            entrypoint_num_gpus=self.gpus or None,
            runtime_env={"env_vars": dict(RAY_ENV)},
            metadata={"autorl.session": self.session_key},
        )

    def follow(self, job: RayJob, on_step: Callable[[dict], None], should_stop: Callable[[], bool]) -> StageWork | None:
        tail = MetricsTail(job.node_dir / "metrics.jsonl")
        while True:
            if should_stop():
                self.stop(job.submission_id)
                raise KeyboardInterrupt
            for record in tail.read_new():
                on_step(record)
            state = self.status(job.submission_id)
            if state in TERMINAL or state is None:
                break
            time.sleep(POLL_S)
        for record in tail.read_new():
            on_step(record)
        result = job.node_dir / remote_stage.RESULT_FILE
        if state != "SUCCEEDED" or not result.is_file():
            self.notify(f"Ray job {job.submission_id} ended {state or 'unknown'} without a result: "
                        f"{self.job_log_tail(job.submission_id)}")
            return None
        return remote_stage.decode(json.loads(result.read_text()), tail.records)

    def stop(self, submission_id: str) -> None:
        """Stop a job and wait (briefly) until Ray says it stopped: its processes are killed."""
        try:
            self.client.stop_job(submission_id)
        except RuntimeError:
            return
        deadline = time.monotonic() + 30
        while self.status(submission_id) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(POLL_S)

    def job_log_tail(self, submission_id: str) -> str:
        try:
            return " | ".join(self.client.get_job_logs(submission_id).strip().splitlines()[-3:])[-400:]
        except RuntimeError:
            return "no log"


def cluster_gpus(address: str) -> int:
    """GPUs the cluster's live nodes offer in all (0 when the state API does not say)."""
    from ray.util.state import list_nodes

    try:
        nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
    except Exception:  # noqa: BLE001 - an old or locked-down dashboard: ask for no GPU rather than fail
        return 0
    return int(sum(float((node.resources_total or {}).get("GPU", 0)) for node in nodes))
