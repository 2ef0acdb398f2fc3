"""Stages on a Ray cluster (``--executor ray``): one Ray job per stage attempt.

Each stage (training, then scoring on validation) is a Ray job running
``python -m autorl.stages.remote_stage`` on whichever node has the CPUs (and GPU) it asks for,
in the sandbox tier that node supports. Its submission id is stable per node attempt
(``autorl-<session run>-<node>-a<attempt>``), so the id is an idempotency key: a
controller killed with ``kill -9`` and resumed finds the job still running (or finished)
and follows it instead of training the stage again. Ray jobs outlive their submitter;
``Ctrl-C`` stops them.

The nodes share no folder with the controller or each other: a stage's inputs (the
session's workspace, the parent checkpoint, its train.py) and outputs (its node folder)
cross the cluster through the session's stash in Ray's object store (``ray_files.py``),
its steps as lines the controller reads while it trains. Each node needs the same Python
environment at the same path. A job whose node is lost mid-stage is submitted again
(``-r1``, ``-r2``: another node takes it); a stage's files arrive once, whichever job
made them.

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
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

from autorl.analysis.curves import read_records
from autorl.errors import ConfigError, SessionError
from autorl.stages import remote_stage
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageWork

LOCAL_ADDRESS = "http://127.0.0.1:8265"
HEAD_PORT = 6380
GCS_PORT = 6379  # Ray's default for a head started elsewhere
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


MAX_NODE_RETRIES = 2  # a stage whose node was lost trains again elsewhere, this many times


class RayStages:
    """Submits stages to a Ray cluster, ships their files through the session's stash and
    follows them until they end."""

    def __init__(self, address: str | None, session_key: str, session_task: dict, session_dir: Path,
                 cpus: float = 1.0, want_gpu: bool = True,
                 notify: Callable[[str], None] = lambda text: None):
        ray_environment()
        from ray.job_submission import JobSubmissionClient

        from autorl.stages import ray_files

        self.address = reach(address)
        self.client = JobSubmissionClient(self.address)
        join_cluster(self.address)
        self.stash = ray_files.open_stash(session_key)
        self.session_key = session_key
        self.session_task = {**session_task,
                             "workspace_key": f"workspace/{session_task['workspace_digest']}"}
        self.session_dir = session_dir
        self.cpus = cpus
        self.gpus = 1 if want_gpu and cluster_gpus(self.address) else 0
        self.notify = notify

    def describe(self) -> str:
        gpu = f", {self.gpus} GPU" if self.gpus else ""
        return (f"stages run as Ray jobs on {self.address} ({self.cpus:g} CPU{gpu} each; files through the "
                "cluster's object store)")

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

    def run(self, attempt: int, spec: TrialSpec, on_step: Callable[[dict], None],
            should_stop: Callable[[], bool]) -> StageWork:
        """Submit the stage (unless its job already exists: then follow it) and wait for its
        result. A job whose node was lost is submitted again (another node takes it); a job
        that ended without a result for another reason fails the stage."""
        Path(spec.output_dir).mkdir(parents=True, exist_ok=True)  # the controller's folder of the node
        retry, state = self.latest(spec.node_id, attempt)
        if state is None and (missing := self.unplaceable()) is not None:
            return StageWork(StageOutcome(None, reason=missing))
        lost: list[str] = []
        while True:
            job = self.submission_id(spec.node_id, attempt, retry)
            if state is None:
                self.submit(job, spec)
            work = self.follow(job, Path(spec.output_dir), on_step, should_stop)
            if work is not None:
                return self.noted(work, lost)
            node = self.lost_node(job)
            if node is None or retry >= MAX_NODE_RETRIES:
                return StageWork(StageOutcome(None, reason="its Ray job ended without a result (stopped, or its "
                                                           f"node was lost); see the job's log: {self.log_tail(job)}"))
            lost.append(node)
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

    def outlived_stop(self, node_id: str, attempt: int, node_dir: Path) -> bool:
        """Whether the node's stage still runs as a Ray job, or ran to its end, after the
        controller stopped: then a resume follows the job instead of training again."""
        from autorl.stages import ray_files

        retry, state = self.latest(node_id, attempt)
        job = self.submission_id(node_id, attempt, retry)
        return state in ("PENDING", "RUNNING") or (
            state == "SUCCEEDED" and ray_files.has_blob(self.stash, f"{job}/out"))

    def submit(self, job: str, spec: TrialSpec) -> None:
        """Put the stage's inputs in the stash (the workspace once per session) and start its job."""
        from autorl.stages import ray_files

        workspace = Path(self.session_task["workspace"])
        # the controller checks the node's train.py out before it starts the stage, and
        # starts a stage with another train.py only once the running ones have ended
        task = remote_stage.stage_task(self.session_task, spec, (workspace / "train.py").read_text(),
                                       self.session_dir)
        key = self.session_task["workspace_key"]
        if not ray_files.has_blob(self.stash, key):
            ray_files.put_blob(self.stash, key, ray_files.pack({".": workspace}, skip=remote_stage.NOT_SHIPPED))
        self.stash.drop.remote(f"{job}/")  # what an earlier submission of the same id left
        if "shipped" in task["start"]:
            ray_files.put_blob(self.stash, f"{job}/parent", ray_files.pack({".": Path(spec.init_checkpoint)}))
        ray_files.put_blob(self.stash, f"{job}/task", json.dumps(task).encode())
        self.client.submit_job(
            entrypoint=f"{sys.executable} -m autorl.stages.remote_stage {ray_files.stash_name(self.session_key)} "
                       f"{job}",
            submission_id=job,
            entrypoint_num_cpus=self.cpus,
            entrypoint_num_gpus=self.gpus or None,
            runtime_env={"env_vars": dict(RAY_ENV)},
            metadata={"autorl.session": self.session_key},
        )

    def follow(self, job: str, node_dir: Path, on_step: Callable[[dict], None],
               should_stop: Callable[[], bool]) -> StageWork | None:
        """Hear the job's steps until it ends; then take its node folder from the stash."""
        import ray

        from autorl.stages import ray_files

        heard, mirror = 0, node_dir / "metrics.jsonl"
        mirror.unlink(missing_ok=True)  # this job's steps only: a lost job's are not the stage's
        while True:
            if should_stop():
                self.stop(job)
                raise KeyboardInterrupt
            lines = ray.get(self.stash.read.remote(f"{job}/metrics", heard))
            heard += len(lines)
            if lines:  # mirrored where a local stage writes them, for whoever tails the node's folder
                with mirror.open("a") as handle:
                    handle.write("".join(line + "\n" for line in lines))
            for line in lines:
                on_step(json.loads(line))
            state = self.status(job)
            if state in TERMINAL or state is None:
                break
            time.sleep(POLL_S)
        blob = ray_files.get_blob(self.stash, f"{job}/out")
        if blob is None:
            self.notify(f"Ray job {job} ended {state or 'unknown'} without a result: {self.log_tail(job)}")
            return None
        for stale in ("checkpoint", "metrics.jsonl", remote_stage.RESULT_FILE):
            path = node_dir / stale
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        ray_files.unpack(blob, node_dir)
        self.stash.drop.remote(f"{job}/")
        data = json.loads((node_dir / remote_stage.RESULT_FILE).read_text())
        work = remote_stage.decode(data, read_records(node_dir / "metrics.jsonl"), node_dir)
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


def join_cluster(dashboard: str) -> None:
    """Connect this process to the cluster as a Ray driver (the stash lives in its object
    store): at ``RAY_ADDRESS`` when it names the head's GCS (``host:port``), else at the
    dashboard's host on Ray's default port (this machine's head: its own port)."""
    import ray

    if ray.is_initialized():
        return
    given = os.environ.get("RAY_ADDRESS", "")
    if given and not given.startswith(("http://", "https://", "ray://")):
        gcs = given
    else:
        host = urllib.parse.urlparse(dashboard).hostname or "127.0.0.1"
        gcs = f"{host}:{HEAD_PORT if dashboard == LOCAL_ADDRESS else GCS_PORT}"
    try:
        ray.init(address=gcs, namespace="autorl", log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"could not join the Ray cluster at {gcs} ({exc}); set RAY_ADDRESS to its head's "
                          "host:port") from exc


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
