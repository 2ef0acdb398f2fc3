"""A shared store on a user's machine: PostgreSQL with an MLflow tracking server in front.

`autorl server up` starts both on loopback under one folder (default ``runs/server``):

- PostgreSQL 15 (``initdb``/``pg_ctl`` from the OS packages; as the ``postgres`` user when
  run as root, since PostgreSQL refuses to run as root) with two databases: ``mlflow``
  (the tracking server's) and ``optuna`` (the studies; both keep an ``alembic_version``
  table, so they cannot share one);
- ``mlflow server`` on that database, serving artifacts from ``server/artifacts`` through
  itself (clients upload over HTTP, so a session on another machine needs only the URL).

Several sessions and people then share one store: ``--tracking-uri http://127.0.0.1:PORT``
and ``--study-storage postgresql://…`` (both printed by ``up``). ``down`` stops both; the
data stays in the folder and ``up`` starts them again on it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from autorl.errors import AutorlError

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
DATABASES = ("mlflow", "optuna")
START_TIMEOUT_S = 180  # a fresh mlflow server migrates its schema first (~30 s here)


class ServerError(AutorlError):
    """The server pair could not be started, stopped or reached."""


@dataclass
class ServerInfo:
    folder: str
    pg_port: int
    mlflow_port: int
    mlflow_pid: int | None = None

    @property
    def database_uri(self) -> str:
        """The Optuna studies' database (``--study-storage``)."""
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/optuna"

    @property
    def backend_store_uri(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/mlflow"

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.mlflow_port}"


def pg_tool(name: str) -> str:
    for folder in PG_BIN_DIRS:
        if (folder / name).exists():
            return str(folder / name)
    if found := shutil.which(name):
        return found
    raise ServerError(f"PostgreSQL's {name} was not found; install PostgreSQL (e.g. apt-get install postgresql)")


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServerError(f"{what} failed: {(done.stderr or done.stdout).strip()[-800:]}")


def state_file(folder: Path) -> Path:
    return folder / "server.json"


def read_info(folder: Path) -> ServerInfo | None:
    try:
        return ServerInfo(**json.loads(state_file(folder).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(uri + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def check_reachable(folder: Path) -> None:
    """The postgres user must be able to reach the data folder (a home folder often is not)."""
    if os.geteuid() == 0 and subprocess.run(["runuser", "-u", "postgres", "--", "test", "-x", str(folder)]).returncode:
        raise ServerError(f"the postgres user cannot reach {folder}; pass --dir in a folder others may enter "
                          "(e.g. /srv/autorl or /tmp/autorl-server)")


def start_postgres(folder: Path, port: int) -> None:
    check_reachable(folder)
    data = folder / "postgres"
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
        run(as_postgres([pg_tool("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync",
                         "--no-locale", "-E", "UTF8"]), "initdb")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    if subprocess.run(as_postgres([pg_tool("pg_ctl"), "-D", str(data), "status"]), capture_output=True).returncode == 0:
        return  # already running (an earlier `up` whose mlflow server stopped)
    run(as_postgres([pg_tool("pg_ctl"), "-D", str(data), "-w", "-l", str(data / "server.log"), "-o", options,
                     "start"]), f"starting PostgreSQL on port {port}")
    for database in DATABASES:
        exists = subprocess.run(as_postgres([pg_tool("psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                                             "-tAc", f"SELECT 1 FROM pg_database WHERE datname='{database}'"]),
                                capture_output=True, text=True)
        if exists.stdout.strip() != "1":
            run(as_postgres([pg_tool("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", database]),
                f"creating database {database}")


def start_mlflow(folder: Path, info: ServerInfo) -> int:
    log = (folder / "mlflow.log").open("ab")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", info.backend_store_uri,
               "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1",
               "--port", str(info.mlflow_port), "--workers", "1"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not healthy(info.tracking_uri):
        if process.poll() is not None:
            raise ServerError(f"mlflow server exited ({process.returncode}); see {folder / 'mlflow.log'}")
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGTERM)
            raise ServerError(f"mlflow server did not answer within {START_TIMEOUT_S} s; see {folder / 'mlflow.log'}")
        time.sleep(0.5)
    return process.pid


def up(folder: Path, pg_port: int = 5433, mlflow_port: int = 5000) -> ServerInfo:
    """Start PostgreSQL and the MLflow server (or report the running pair)."""
    folder = folder.resolve()
    if (info := read_info(folder)) is not None and healthy(info.tracking_uri):
        return info
    folder.mkdir(parents=True, exist_ok=True)
    info = ServerInfo(str(folder), pg_port, mlflow_port)
    state_file(folder).write_text(json.dumps(asdict(info), indent=2))  # `down` can stop what started
    start_postgres(folder, pg_port)
    info.mlflow_pid = start_mlflow(folder, info)
    state_file(folder).write_text(json.dumps(asdict(info), indent=2))
    return info


def is_mlflow_server(pid: int) -> bool:
    """The pid still names the server `up` started (not a process that reused the number)."""
    try:
        return b"mlflow" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def down(folder: Path) -> ServerInfo | None:
    """Stop the pair started in ``folder`` (its data stays)."""
    folder = folder.resolve()
    info = read_info(folder)
    if info is None:
        return None
    if info.mlflow_pid and is_mlflow_server(info.mlflow_pid):
        try:
            os.killpg(info.mlflow_pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while is_mlflow_server(info.mlflow_pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # its port is free when `down` returns
    data = folder / "postgres"
    if (data / "postmaster.pid").exists():
        run(as_postgres([pg_tool("pg_ctl"), "-D", str(data), "-w", "-m", "fast", "stop"]), "stopping PostgreSQL")
    state_file(folder).unlink(missing_ok=True)
    return info
