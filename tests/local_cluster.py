"""A Ray cluster of several nodes on one machine, whose worker nodes cannot see the session.

Each node is its own `ray start` (raylet, object store, temp folder, ports); each worker
node starts inside a mount namespace (bubblewrap) where the folders in ``hidden`` are
empty, so a stage that reached for the controller's session folder would find nothing:
what crosses the cluster must cross it through Ray. Every process of a node carries the
node's name in its environment, which is how a node is killed whole (``kill``): its raylet,
workers and the stage processes they started, as when a machine is lost.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

RAY = str(Path(sys.executable).parent / "ray")
CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
# a lost node is declared dead within a few seconds, not Ray's default half minute
SYSTEM_CONFIG = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3, "health_check_timeout_ms": 1000}
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def release_held_stages(folder: Path) -> None:
    """Lets the stand-in stages (held_copy_train.py) under a node's folder finish, while the node
    writes and removes in it: os.walk skips what vanishes, and a stage gone meanwhile is fine."""
    for parent, _, files in os.walk(folder):
        if "metrics.jsonl" in files:
            try:
                (Path(parent) / "release").touch()
            except FileNotFoundError:
                pass


# Workers' ports come from below the kernel's ephemeral range (32768 and up, where free_port's
# ports fall), so a node's worker range never holds one of its other ports.
WORKER_PORTS_LOW, WORKER_PORTS_HIGH, WORKER_PORTS_PER_NODE = 11000, 32000, 201


def node_ports(first_worker_port: int) -> list[str]:
    """Every port a node listens on, free ones, so the cluster shares none with another Ray."""
    names = ("node-manager-port", "object-manager-port", "metrics-export-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "runtime-env-agent-port")
    last = first_worker_port + WORKER_PORTS_PER_NODE - 1
    return [f"--{name}={free_port()}" for name in names] + [f"--min-worker-port={first_worker_port}",
                                                             f"--max-worker-port={last}"]


class LocalCluster:
    def __init__(self, root: Path, workers: int = 2, hidden: tuple[Path, ...] = (), cpus_per_worker: int = 1):
        self.root = root
        self.names = [f"worker{i}" for i in range(1, workers + 1)]
        self.hidden = hidden
        self.cpus = cpus_per_worker
        self.tag = uuid.uuid4().hex[:12]
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        slots = (WORKER_PORTS_HIGH - WORKER_PORTS_LOW) // WORKER_PORTS_PER_NODE - (workers + 1)
        self.first_worker_port = WORKER_PORTS_LOW + random.randrange(slots) * WORKER_PORTS_PER_NODE

    def worker_ports_of(self, node: str) -> int:
        """The first of a node's own block of worker ports (head 0, worker1 1, ...)."""
        index = 0 if node == "head" else self.names.index(node) + 1
        return self.first_worker_port + index * WORKER_PORTS_PER_NODE

    @property
    def gcs(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def env(self, node: str) -> dict:
        return {**os.environ, **CLUSTER_ENV, "AUTORL_TEST_CLUSTER": self.tag, "AUTORL_TEST_NODE": node,
                "AUTORL_NODE_DIR": str(self.root / node / "work")}

    def start(self) -> LocalCluster:
        head = [RAY, "start", "--head", f"--port={self.gcs_port}", "--node-ip-address=127.0.0.1",
                "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}", "--num-cpus=0",
                f"--ray-client-server-port={free_port()}", f"--temp-dir={self.root / 'head' / 'tmp'}",
                f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
                f"--system-config={json.dumps(SYSTEM_CONFIG)}", *node_ports(self.worker_ports_of("head"))]
        self.run(head, "head")
        starts = [self.spawn(self.worker_command(name), name) for name in self.names]
        for name, process in zip(self.names, starts):
            out, _ = process.communicate(timeout=180)
            if process.returncode != 0:
                raise RuntimeError(f"{name} did not start: {out[-2000:]}")
        self.wait_for_nodes(len(self.names) + 1)
        return self

    def worker_command(self, name: str) -> list[str]:
        hide = [arg for path in self.hidden for arg in ("--tmpfs", str(path))]
        ray = [RAY, "start", f"--address={self.gcs}", "--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}",
               f"--resources={json.dumps({name: 1})}", f"--temp-dir={self.root / name / 'tmp'}",
               f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
               *node_ports(self.worker_ports_of(name))]
        return ["bwrap", "--dev-bind", "/", "/", *hide, "--", *ray] if hide else ray

    def spawn(self, argv: list[str], node: str) -> subprocess.Popen:
        (self.root / node / "work").mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env(node))

    def run(self, argv: list[str], node: str) -> None:
        out, _ = (process := self.spawn(argv, node)).communicate(timeout=180)
        if process.returncode != 0:
            raise RuntimeError(f"{node} did not start: {out[-2000:]}")

    def nodes(self) -> dict[str, str]:
        """Alive node ids by name (``head``, ``worker1``…)."""
        from ray.util.state import list_nodes

        found = {}
        alive = list_nodes(address=self.dashboard, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False)
        for node in alive:
            total = node.resources_total or {}
            name = next((n for n in self.names if n in total), "head" if "node:__internal_head__" in total else "")
            found[name] = node.node_id
        return found

    def wait_for_nodes(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.nodes()) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.nodes())} of {count} nodes joined")
            time.sleep(0.5)

    def pids(self, node: str | None = None) -> list[int]:
        """Processes of this cluster (of one node), found by the names in their environment."""
        want = {f"AUTORL_TEST_CLUSTER={self.tag}".encode()}
        if node is not None:
            want.add(f"AUTORL_TEST_NODE={node}".encode())
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    variables = set((entry / "environ").read_bytes().split(b"\0"))
                except OSError:
                    continue
                if want <= variables:
                    found.append(int(entry.name))
        return found

    def kill(self, node: str) -> int:
        """Lose a node whole: SIGKILL every process it runs."""
        pids = self.pids(node)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def stop(self) -> None:
        for _ in range(3):
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)


class TrackingServer:
    """An MLflow tracking server on loopback that serves its own artifact root: the store a
    cluster's nodes reach over the network (theirs hide the test's folders)."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> TrackingServer:
        import urllib.request

        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
             "--artifacts-destination", str(self.folder / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=(self.folder / "server.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {(self.folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
