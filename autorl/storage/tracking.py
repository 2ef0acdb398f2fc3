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
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable

from autorl.errors import TrackingError
from autorl.storage.store import prepare_sqlite, sqlite_path

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


RETRYABLE = ("database is locked", "database table is locked", "unable to open database", "temporarily unavailable",
             "Connection refused", "Connection reset", "Max retries exceeded", "503", "502")


class RetryingClient:
    """An MlflowClient whose calls are retried with exponential backoff while the store is
    locked or briefly unreachable (about 15 s in all), then fail with the store's error."""

    def __init__(self, client, attempts: int = 6, first_delay: float = 0.5):
        self._client = client
        self._attempts = attempts
        self._first_delay = first_delay

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            delay = self._first_delay
            for attempt in range(self._attempts):
                try:
                    return attribute(*args, **kwargs)
                except Exception as exc:  # MLflow wraps store errors in several types
                    if attempt == self._attempts - 1 or not any(text in str(exc) for text in RETRYABLE):
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
        """False only for a SQLite store whose file is not there (servers are asked)."""
        database = sqlite_path(self.uri)
        return database is None or database.is_file()

    @property
    def client(self):
        if self._client is None:
            import logging

            from mlflow.tracking import MlflowClient

            logging.getLogger("mlflow").setLevel(logging.WARNING)  # schema-migration chatter

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
        try:
            experiment = self.client.get_experiment_by_name(EXPERIMENT)
            if experiment is None:
                location = self.artifact_root.resolve().as_uri() if self.artifact_root else None
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
        if not self.exists():
            return []
        return self.client.search_runs(
            [self.ensure_store()], filter_string=tag_filter("autorl.kind", SESSION_KIND), order_by=["start_time DESC"]
        )

    def start_session(self, name: str, params: dict[str, Any], tags: dict[str, str]) -> str:
        run = self.client.create_run(
            self.ensure_store(),
            run_name=name,
            tags={"autorl.kind": SESSION_KIND, "autorl.session": name, "autorl.status": "running"},
        )
        self.set_tags(run.info.run_id, tags)
        self.client.log_batch(run.info.run_id, params=_params(params))
        return run.info.run_id

    def reopen_session(self, run_id: str, resumes: int) -> None:
        self.set_tags(run_id, {"autorl.status": "running", "autorl.reason": "", "autorl.resumes": resumes})
        self.client.update_run(run_id, status="RUNNING")

    def end_session(self, run_id: str, status: str, reason: str = "") -> None:
        """status: finished | failed | stopped."""
        self.set_tags(run_id, {"autorl.status": status, "autorl.reason": reason})
        mlflow_status = {"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}[status]
        self.client.set_terminated(run_id, status=mlflow_status)

    # -- nodes ----------------------------------------------------------------------------

    def start_node(self, session_run_id: str, session: str, node_id: str, tags: dict[str, str], params: dict,
                   run_name: str | None = None) -> str:
        run = self.client.create_run(
            self.ensure_store(),
            run_name=run_name or node_id,
            tags={"mlflow.parentRunId": session_run_id, "autorl.kind": NODE_KIND, "autorl.session": session,
                  "autorl.node_id": node_id},
        )
        self.set_tags(run.info.run_id, tags)  # long values (a rationale) go to artifacts
        self.client.log_batch(run.info.run_id, params=_params(params))
        return run.info.run_id

    def node_runs(self, session_run_id: str, all_attempts: bool = False) -> list:
        """The session's node runs, one per node (its latest attempt) unless ``all_attempts``."""
        runs = self.client.search_runs(
            [self.ensure_store()],
            filter_string=(f"{tag_filter('mlflow.parentRunId', session_run_id)} and "
                           f"{tag_filter('autorl.kind', NODE_KIND)}"),
            max_results=5000,
        )
        runs = runs if all_attempts else latest_attempts(runs)
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


def latest_attempts(runs: list) -> list:
    """One run per node id: the highest attempt (a re-run after a stop supersedes the killed one)."""
    latest: dict[str, Any] = {}
    for run in runs:
        node_id = run.data.tags.get("autorl.node_id")
        if node_id not in latest or _attempt(run) >= _attempt(latest[node_id]):
            latest[node_id] = run
    return list(latest.values())


def _params(values: dict[str, Any]):
    from mlflow.entities import Param

    return [Param(str(k), json.dumps(v) if isinstance(v, (dict, list)) else str(v)) for k, v in values.items()]
