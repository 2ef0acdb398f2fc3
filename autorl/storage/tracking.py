"""MLflow as the store of record.

A session is a parent run; each node is a child run (``mlflow.parentRunId``) with its
hyperparameters as params, its identity and outcome as tags, TRL's per-step metrics
(global step = steps of all earlier stages on its path + local step), and its spec,
logs, metrics, diff and evaluation as artifacts. ``autorl ls`` and ``show`` read
everything back from here, so what MLflow shows is what autorl knows.

Default store: SQLite at ``runs/mlflow.db`` with artifacts in ``runs/mlartifacts``;
it is created (and its schema migrated) once, before any trial starts.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from autorl import faults
from autorl.errors import TrackingError
from autorl.storage.store import never_made, prepare_sqlite, sqlite_path

EXPERIMENT = "autorl"
SESSION_KIND = "session"
NODE_KIND = "node"
TAG_LIMIT = 5000  # MLflow takes 8,000 characters a tag value; longer ones go to an artifact
LONG_TAG = "autorl-artifact:"  # the value of a tag whose text is in the run's artifact at this path
LONG_TAGS_DIR = "tags"
_BATCH = 900  # MLflow accepts at most 1000 metrics per log_batch call


def default_uri(runs_dir: Path) -> str:
    return f"sqlite:///{runs_dir / 'mlflow.db'}"


STORE_FILE = "store.json"  # in a session's folder: the tracking store it is recorded in


def remember_store(session_dir: Path, uri: str) -> None:
    (session_dir / STORE_FILE).write_text(json.dumps({"tracking_uri": uri}) + "\n")


def remembered_uri(runs_dir: Path, session: str) -> str | None:
    """The tracking store a session of ``runs_dir`` was recorded in, if its folder says."""
    path = runs_dir / "sessions" / session / STORE_FILE
    try:
        return json.loads(path.read_text())["tracking_uri"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def probe_http(uri: str, timeout: float = 5.0) -> None:
    """Fail fast when a tracking server does not answer (MLflow itself retries for minutes)."""
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as response:
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TrackingError(f"tracking server {uri} does not answer ({exc}); "
                            "start it or pass another --tracking-uri") from exc


SQLITE_BUSY, SQLITE_LOCKED = 5, 6  # "database is locked", "database table is locked" (primary result codes)
TRANSIENT_HTTP = frozenset({502, 503, 504})  # a proxy or server with nothing for us yet; 500 is a server bug
LOCKED, UNAVAILABLE, CONNECTION = "locked", "unavailable", "connection"
RETRYABLE = frozenset({LOCKED, UNAVAILABLE, CONNECTION})
# Calls whose repeat after an unknown outcome can record something twice: a 503 from a proxy,
# a reset connection or a lost answer may come after the store made the run. They are
# repeated only where the store says it wrote nothing (SQLite busy: the transaction was
# rolled back); the caller looks the run up instead of calling again.
ONCE_ONLY = {"create_run": frozenset({LOCKED})}
CREATE_TRIES = 3  # a node's run: created again (the first one looked up and discarded) after a lost answer


def wrapped_errors(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error it wraps: causes, contexts, SQLAlchemy's ``orig``, urllib3's
    ``reason`` and the errors requests passes as arguments (MLflow raises its own error while
    handling requests', so the typed one is only in the chain)."""
    found: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        error = todo.pop(0)
        if not isinstance(error, BaseException) or any(error is seen for seen in found):
            continue
        found.append(error)
        todo += [error.__cause__, error.__context__, getattr(error, "orig", None), getattr(error, "reason", None),
                 *(arg for arg in error.args if isinstance(arg, BaseException))]
    return found


def transient(exc: BaseException) -> str | None:
    """Why repeating the call that raised ``exc`` may succeed, judged by the wrapped errors'
    types and codes, not by what a message happens to contain (a run id can hold "503"):
    ``locked`` (SQLite busy or locked: nothing was written), ``unavailable`` (the tracking
    server or a proxy answered 502, 503 or 504, or TEMPORARILY_UNAVAILABLE), ``connection``
    (no connection, or it broke); None otherwise. The one status urllib3 gives up on is
    kept only in its ``ResponseError``'s fixed message, so that message is parsed."""
    import re
    import sqlite3

    import requests
    import sqlalchemy.exc
    from urllib3.exceptions import ResponseError

    errors = wrapped_errors(exc)
    for error in errors:
        if isinstance(error, sqlite3.Error):  # a SQLite store: only its locks pass
            code = getattr(error, "sqlite_errorcode", None)
            return LOCKED if code is not None and (code & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED) else None
    if any(isinstance(error, sqlalchemy.exc.SQLAlchemyError) for error in errors):
        return None  # another database's error (MLflow calls every OperationalError TEMPORARILY_UNAVAILABLE)
    status_text = re.compile(re.escape(ResponseError.SPECIFIC_ERROR).replace(r"\{status_code\}", r"(\d+)"))
    for error in errors:
        if isinstance(error, ResponseError):  # urllib3 gave up on a status MLflow retries (its only record of it)
            match = status_text.fullmatch(str(error))
            if match and int(match[1]) in TRANSIENT_HTTP:
                return UNAVAILABLE
        if isinstance(error, requests.exceptions.ConnectionError) and \
                not isinstance(error, requests.exceptions.SSLError):
            return CONNECTION
        if isinstance(error, requests.exceptions.HTTPError) and error.response is not None and \
                error.response.status_code in TRANSIENT_HTTP:
            return UNAVAILABLE
    status = getattr(exc, "get_http_status_code", None)  # an MlflowException the server sent (RestException)
    if status is not None and status() in TRANSIENT_HTTP:
        return UNAVAILABLE
    return None


class RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff while the store is
    locked or briefly unreachable (about 15 s of waits, besides SQLite's own 20 s per try
    and MLflow's HTTP retries), then fail with the store's error. Only typed transient
    errors are retried (``transient``), and a call in ``ONCE_ONLY`` only on those that
    guarantee it wrote nothing."""

    def __init__(self, client, attempts: int = 6, first_delay: float = 0.5):
        self._client = client
        self._attempts = attempts
        self._first_delay = first_delay

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute
        retryable = ONCE_ONLY.get(name, RETRYABLE)

        def call(*args, **kwargs):
            delay = self._first_delay
            for attempt in range(self._attempts):
                try:
                    return attribute(*args, **kwargs)
                except Exception as exc:  # MLflow wraps store errors in several types
                    if attempt == self._attempts - 1 or transient(exc) not in retryable:
                        raise
                    time.sleep(delay)
                    delay *= 2

        return call


def tag_filter(key: str, value: str) -> str:
    return f"tags.`{key}` = '{value}'"


class Tracker:
    """Writes and reads autorl's sessions and nodes in one MLflow store."""

    def __init__(self, uri: str, artifact_root: Path | None = None, create: bool = True):
        self.uri = uri
        self.artifact_root = artifact_root
        self.create = create  # False for commands that only read: a missing store stays missing
        self._client = None
        self._experiment_id: str | None = None
        self._tracing_ready = False
        self._checkpoints = None

    @classmethod
    def for_runs_dir(cls, runs_dir: Path, uri: str | None = None, create: bool = True) -> "Tracker":
        return cls(uri or default_uri(runs_dir), runs_dir / "mlartifacts", create)

    def check_creatable(self) -> None:
        """A server must answer, and a SQLite store outside the runs directory must have a folder to go in."""
        if self.uri.startswith(("http://", "https://")):
            probe_http(self.uri)
        database = sqlite_path(self.uri)
        if database is not None and self.artifact_root is not None and \
                database.parent != self.artifact_root.parent and not database.parent.is_dir():
            raise TrackingError(f"cannot create tracking store {self.uri}: folder {database.parent} does not exist; "
                                "create it or pass another --tracking-uri")

    def exists(self) -> bool:
        """False for a SQLite store whose file is not there, or that a killed first start left
        half-made with no runs in it (servers are asked)."""
        database = sqlite_path(self.uri)
        if database is None or self._experiment_id:  # opened already: whole
            return True
        return database.is_file() and not never_made(database)

    @property
    def checkpoints(self):
        """The node checkpoints in this store's artifact repositories (autorl/storage/checkpoints.py)."""
        from autorl.storage.checkpoints import CheckpointStore

        if self._checkpoints is None:
            self._checkpoints = CheckpointStore(self.uri, self.client)
        return self._checkpoints

    def local_artifact_root(self) -> Path | None:
        """The experiment's artifact folder when it is on this machine (trials must not see it)."""
        from mlflow.utils.file_utils import local_file_uri_to_path

        location = self.client.get_experiment(self.ensure_store()).artifact_location
        if location.startswith("file:") or location.startswith("/"):
            return Path(local_file_uri_to_path(location))
        return None

    @property
    def client(self):
        if self._client is None:
            import logging

            from mlflow.tracking import MlflowClient

            logging.getLogger("mlflow").setLevel(logging.WARNING)  # schema-migration chatter
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per file fetched

            try:
                self._client = RetryingClient(MlflowClient(tracking_uri=self.uri))
            except Exception as exc:  # an unknown scheme, a bad path: MLflow raises many kinds
                fix = ("if an interrupted start half-made it, `autorl research` remakes it when it holds no runs, "
                       f"else back it up and run `mlflow db upgrade {self.uri}`") if sqlite_path(self.uri) else \
                    "pass a sqlite:///PATH, http(s)://SERVER or database URI as --tracking-uri"
                raise TrackingError(f"cannot open tracking store {self.uri}: {first_line(exc)}; {fix}") from exc
        return self._client

    # -- store ------------------------------------------------------------------------

    def ensure_store(self) -> str:
        """Reach (and for SQLite create and migrate) the store; return the experiment id."""
        if self._experiment_id:
            return self._experiment_id
        if self.uri.startswith(("http://", "https://")):
            probe_http(self.uri)
        database = sqlite_path(self.uri)
        if database is not None and not database.is_file() and not self.create:
            raise TrackingError(f"no tracking store at {database}; `autorl research` creates it")
        if database is not None and self.create:
            prepare_sqlite(self.uri, database)
        served = self.uri.startswith(("http://", "https://"))  # a server keeps artifacts in its own root
        try:
            experiment = self.client.get_experiment_by_name(EXPERIMENT)
            if experiment is None:
                location = self.artifact_root.resolve().as_uri() if self.artifact_root and not served else None
                self._experiment_id = self.client.create_experiment(EXPERIMENT, artifact_location=location)
            else:
                self._experiment_id = experiment.experiment_id
        except Exception as exc:  # MLflow raises many kinds; the user needs one line
            raise TrackingError(f"cannot open tracking store {self.uri}: {first_line(exc)}") from exc
        return self._experiment_id

    # -- sessions -----------------------------------------------------------------------

    def find_session(self, name: str):
        if not self.exists():
            return None
        runs = self.client.search_runs(
            [self.ensure_store()],
            filter_string=f"{tag_filter('autorl.kind', SESSION_KIND)} and {tag_filter('autorl.session', name)}",
            max_results=1,
        )
        return self.read_long_tags(runs[0]) if runs else None

    def sessions(self) -> list:
        """Every session's run, newest first, each tag holding its whole value (``read_long_tags``)."""
        if not self.exists():
            return []
        runs = self.client.search_runs(
            [self.ensure_store()], filter_string=tag_filter("autorl.kind", SESSION_KIND), order_by=["start_time DESC"]
        )
        return [self.read_long_tags(run) for run in runs]

    def start_session(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        """The session's run, created with every tag at once: a kill can leave a run with
        its name and no config only where a tag is too long for one (``set_tags``)."""
        identity = {"autorl.kind": SESSION_KIND, "autorl.session": name, "autorl.status": "running"}
        run_id = self._create_run(name, {**identity, **tags})
        self.client.log_batch(run_id, params=_params(params))
        return run_id

    def discard(self, run_id: str) -> None:
        """Delete a run that never became a record (a creation cut short): readers no longer see it."""
        self.client.delete_run(run_id)

    def reopen_session(self, run_id: str, resumes: int) -> None:
        self.set_tags(run_id, {"autorl.status": "running", "autorl.reason": "", "autorl.resumes": resumes})
        self.client.update_run(run_id, status="RUNNING")

    def end_session(self, run_id: str, status: str, reason: str = "") -> None:
        """status: finished | failed | stopped."""
        self.set_tags(run_id, {"autorl.status": status, "autorl.reason": reason})
        mlflow_status = {"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}[status]
        self.client.set_terminated(run_id, status=mlflow_status)

    # -- nodes ----------------------------------------------------------------------------

    def start_node(self, session_run_id: str, session: str, node_id: str, attempt: int, tags: dict[str, str],
                   params: dict, run_name: str | None = None) -> str:
        """The run of one attempt of a node, created once with every tag at once.

        A run another creation of the same attempt left behind (a controller killed while
        creating it, a call repeated after a lost connection) is discarded first, so a node
        attempt never has two runs, and a run never exists without the node's record
        (except where a tag is too long for one, whose artifact is written after)."""
        identity = {"mlflow.parentRunId": session_run_id, "autorl.kind": NODE_KIND, "autorl.session": session,
                    "autorl.node_id": node_id}
        for tries_left in reversed(range(CREATE_TRIES)):
            for stale in self._node_attempt_runs(session_run_id, node_id, attempt):
                self.discard(stale.info.run_id)
            try:
                run_id = self._create_run(run_name or node_id, {**identity, **tags})
                break
            except Exception as exc:  # a lost answer may come after the store made the run: look again
                if not tries_left or transient(exc) not in (UNAVAILABLE, CONNECTION):
                    raise
                time.sleep(1.0)
        self.client.log_batch(run_id, params=_params(params))
        return run_id

    def _node_attempt_runs(self, session_run_id: str, node_id: str, attempt: int) -> list:
        runs = self.client.search_runs(
            [self.ensure_store()],
            filter_string=(f"{tag_filter('mlflow.parentRunId', session_run_id)} and "
                           f"{tag_filter('autorl.node_id', node_id)}"),
            max_results=1000,
        )
        return [r for r in runs if r.data.tags.get("autorl.attempt", "1") == str(attempt)]

    def _create_run(self, run_name: str, tags: dict[str, Any]) -> str:
        """A run holding ``tags``: those short enough at creation, in one write; longer ones
        then go to artifacts, each tag pointing at its own (``set_tags``)."""
        short = {key: str(value) for key, value in tags.items() if len(str(value)) <= TAG_LIMIT}
        run = self.client.create_run(self.ensure_store(), run_name=run_name, tags=short)
        faults.point("run_created")
        if long := {key: value for key, value in tags.items() if key not in short}:
            self.set_tags(run.info.run_id, long)
        return run.info.run_id

    def node_runs(self, session_run_id: str) -> list:
        """Every run of the session's nodes (each attempt of each), ordered by node and attempt;
        ``records.nodes_from_runs`` makes nodes of them."""
        runs = self.client.search_runs(
            [self.ensure_store()],
            filter_string=(f"{tag_filter('mlflow.parentRunId', session_run_id)} and "
                           f"{tag_filter('autorl.kind', NODE_KIND)}"),
            max_results=5000,
        )
        return sorted((self.read_long_tags(r) for r in runs),
                      key=lambda r: (r.data.tags.get("autorl.node_id", ""), _attempt(r)))

    def end_node(self, run_id: str, failed: bool, killed: bool = False) -> None:
        self.client.set_terminated(run_id, status="KILLED" if killed else "FAILED" if failed else "FINISHED")

    # -- shared ---------------------------------------------------------------------------

    def set_tags(self, run_id: str, tags: dict[str, Any]) -> None:
        """Set tags; a value longer than a tag holds goes to an artifact, and the tag points
        at it (``read_long_tags`` puts it back), so nothing is cut."""
        from mlflow.entities import RunTag

        short = {}
        for key, value in tags.items():
            text = str(value)
            if len(text) > TAG_LIMIT:
                path = f"{LONG_TAGS_DIR}/{key}.txt"
                self.client.log_text(run_id, text, path)
                text = LONG_TAG + path
            short[key] = text
        self.client.log_batch(run_id, tags=[RunTag(k, v) for k, v in short.items()])

    def read_long_tags(self, run):
        """``run`` with every tag that points at an artifact (``set_tags``) holding its whole value."""
        for key, value in list(run.data.tags.items()):
            if value.startswith(LONG_TAG):
                try:
                    local = self.client.download_artifacts(run.info.run_id, value[len(LONG_TAG):])
                    run.data.tags[key] = Path(local).read_text()
                except Exception as exc:  # noqa: BLE001 - any store failure is reported with the run
                    raise TrackingError(f"run {run.info.run_id}: tag {key} is stored in {value[len(LONG_TAG):]}, "
                                        f"which cannot be read: {first_line(exc)}") from exc
        return run

    def log_metrics(self, run_id: str, values: dict[str, float], step: int = 0) -> None:
        self.log_step_records(run_id, [{"step": step, **values}], offset=0)

    def log_step_records(self, run_id: str, records: Iterable[dict], offset: int) -> None:
        """Per-step metric dicts (``step`` plus numeric keys), shifted by ``offset``."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), now, offset + int(record.get("step", 0)))
            for record in records
            for key, value in record.items()
            if key != "step" and isinstance(value, (int, float)) and value == value  # drop NaN
        ]
        for start in range(0, len(metrics), _BATCH):
            self.client.log_batch(run_id, metrics=metrics[start : start + _BATCH])

    def log_artifacts(self, run_id: str, paths: Iterable[Path], artifact_path: str | None = None) -> None:
        for path in paths:
            if path.is_file():
                self.client.log_artifact(run_id, str(path), artifact_path)

    @contextmanager
    def llm_span(self, session_run_id: str, session: str, name: str):
        """An MLflow trace for one LLM call, linked to the session's run."""
        import mlflow

        if not self._tracing_ready:  # the fluent API's global store, set once per tracker
            mlflow.set_tracking_uri(self.uri)
            mlflow.set_experiment(experiment_id=self.ensure_store())
            self._tracing_ready = True
        with mlflow.start_span(name=name, span_type="LLM") as span:
            mlflow.update_current_trace(tags={"autorl.session": session}, metadata={"mlflow.sourceRun": session_run_id})
            yield span

    def log_text(self, run_id: str, text: str, name: str) -> None:
        self.client.log_text(run_id, text, name)


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _attempt(run) -> int:
    return int(run.data.tags.get("autorl.attempt", 1))


def _params(values: dict[str, Any]):
    from mlflow.entities import Param

    return [Param(str(k), json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in values.items()]
