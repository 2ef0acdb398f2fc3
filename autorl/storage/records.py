"""The session and node records in MLflow: one codec each, used by the controller
(writing), resume and report (reading), so what is written is exactly what is read back.

A node run carries its whole record as one JSON tag (``autorl.node``: ``Node.to_dict``,
the same codec the live channel uses), a few tags derived from it for filtering in
MLflow's UI (status, parent, attempt, diagnosis names, …), its scores and sizes as
metrics and its hyperparameters as params.

Stored records are a format. Every run written from version 3 on carries
``autorl.record_version``; readers accept every version ever written:

- version 1 (no version tag; the first release): one tag per node field
  (``autorl.hyperparameters``, ``autorl.findings``, …); the session's template and
  workspace under ``autorl.template`` and ``autorl.workspace``.
- version 2 (no version tag; the package regrouping): as version 1, but the session's
  keys were ``autorl.stages.template`` and ``autorl.stages.workspace``.
- version 3: the node record in ``autorl.node``; the session keys of version 1.
- version 4 (this one): as version 3; a node's record says where its checkpoint is
  (``checkpoint``: ``stored`` in its run's artifacts, ``deleted`` by retention). A node of
  an earlier version has it in the session folder (``nodes/<id>/checkpoint``), and its
  session's Optuna study is in the runs directory's shared journal.

A stored session config written before an option existed reads with that option as the
session ran: ``noise_probe`` off.

A node run that holds no record (its creation was cut short before version 3 wrote
every tag at once) is not a node: readers skip it, and the node's next creation takes
its place (``Tracker.start_node``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from autorl.config import SessionConfig
from autorl.errors import RecordError
from search.tree import Comparison, Decision, Finding, Node, Status

RECORD_VERSION = 4
VERSION_KEY = "autorl.record_version"
NODE_KEY = "autorl.node"
RENAMED_SESSION_KEYS = {"autorl.stages.template": "autorl.template",  # version 2 -> the others
                        "autorl.stages.workspace": "autorl.workspace"}
TERMINAL = {"succeeded": Status.SUCCEEDED, "failed": Status.FAILED}
NODE_METRICS = ("val_score", "val_stderr", "test_score", "test_stderr", "train_reward", "steps", "stage_seconds")


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _loads(tags: dict, key: str, default: Any, run_id: str = "?") -> Any:
    """A JSON tag's value (``default`` when the tag is absent); a value that does not decode
    is an error naming the run, never silently a default."""
    text = tags.get(key)
    if not text:
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise RecordError(f"MLflow run {run_id}: tag {key} is not valid JSON ({exc}); the record is damaged") from exc


def node_tags(node: Node) -> dict[str, str]:
    """A node's whole record (``autorl.node``) and the tags derived from it for MLflow's UI
    (readers use only the record)."""
    tags: dict[str, Any] = {
        VERSION_KEY: RECORD_VERSION,
        NODE_KEY: dumps(node.to_dict()),
        "autorl.node_id": node.id,
        "autorl.parent_node": node.parent or "base",
        "autorl.status": node.status.value,
        "autorl.reason": node.reason,
        "autorl.rationale": node.rationale,
        "autorl.attempt": node.attempt,
        "autorl.proposer": node.proposer,
        "autorl.git_commit": node.commit,
        "mlflow.source.git.commit": node.commit,
        "autorl.edited": node.edited,
        "autorl.kept": node.kept,
        "autorl.diagnosis": ",".join(f.name for f in node.diagnosis),  # names, for filtering in MLflow's UI
        "autorl.verdict": node.comparison.verdict if node.comparison else "",
        "autorl.checkpoint": node.checkpoint,
    }
    if node.optuna_trial is not None:
        tags["autorl.optuna_trial"] = node.optuna_trial
    if node.decision is not None:
        tags.update({"autorl.decision": node.decision.action, "autorl.decided_by": node.decision.decided_by})
    return {key: str(value) for key, value in tags.items()}


def record_version(tags: dict) -> int:
    """The format version a run's tags were written in (1 and 2 carry no tag; both read as 1 here,
    they differ only in session keys, which ``session_tags`` reads either way)."""
    return int(tags.get(VERSION_KEY) or 1)


def holds_record(run) -> bool:
    """Whether a node run holds its node's record: False for one whose creation was cut short."""
    tags = run.data.tags
    return bool(tags.get(NODE_KEY) if record_version(tags) >= 3 else tags.get("autorl.hyperparameters"))


def node_metrics(node: Node) -> dict[str, float]:
    values = {"stage_seconds": node.seconds, "steps": node.steps}
    if node.scored:
        values.update(val_score=node.val_score, val_stderr=node.val_stderr)
    if node.train_reward is not None:
        values["train_reward"] = node.train_reward
    if node.peak_memory_mb is not None:
        values["peak_memory_mb"] = node.peak_memory_mb
    if node.weight_drift is not None:
        values["weight_drift"] = node.weight_drift
    values.update({f"timing_{key}": value for key, value in node.timing.items() if isinstance(value, (int, float))})
    values.update({f"val_{key}": value for key, value in node.eval_metrics.items()})
    return values


def decode_status(run) -> Status:
    """Succeeded/failed only when the run ended so; a run cut short is interrupted or still running."""
    tag = run.data.tags.get("autorl.status", "")
    if run.info.status in ("FINISHED", "FAILED") and tag in TERMINAL:
        return TERMINAL[tag]
    return Status.INTERRUPTED if tag == "interrupted" or run.info.status == "KILLED" else Status.RUNNING


def node_from_run(run) -> Node:
    """The node a run records (its latest attempt); scores and findings only when the stage ended."""
    status = decode_status(run)
    if record_version(run.data.tags) >= 3:
        node = Node.from_dict(_loads(run.data.tags, NODE_KEY, {}, run.info.run_id))
    else:
        node = _node_from_field_tags(run)
    node.status, node.mlflow_run_id = status, run.info.run_id
    if status not in TERMINAL.values():  # a stage cut short: what it had reached is not a result
        node.reason, node.val_score, node.val_stderr, node.eval_engine = "", None, None, ""
        node.diagnosis, node.comparison, node.eval_metrics = [], None, {}
    return node


def nodes_from_runs(runs: list) -> list[Node]:
    """The nodes a session's runs record: one per node id (its latest attempt that holds a
    record), in id order."""
    latest: dict[str, Any] = {}
    for run in runs:
        if not holds_record(run):
            continue
        node_id = run.data.tags.get("autorl.node_id")
        if node_id not in latest or _attempt(run) >= _attempt(latest[node_id]):
            latest[node_id] = run
    return [node_from_run(latest[node_id]) for node_id in sorted(latest)]


def _attempt(run) -> int:
    return int(run.data.tags.get("autorl.attempt", 1))


def _node_from_field_tags(run) -> Node:
    """A node as versions 1 and 2 wrote it: one tag or metric per field."""
    tags, metrics = run.data.tags, run.data.metrics
    parent = tags.get("autorl.parent_node", "base")
    decision = None
    if tags.get("autorl.decision"):
        decision = Decision(action=tags["autorl.decision"], decided_by=tags.get("autorl.decided_by", ""),
                            reason=tags.get("autorl.decision_reason", ""))
    comparison = _loads(tags, "autorl.comparison", None, run.info.run_id)
    return Node(
        id=tags["autorl.node_id"],
        parent=None if parent == "base" else parent,
        depth=int(tags.get("autorl.depth", 1)),
        hyperparameters=_loads(tags, "autorl.hyperparameters", {}, run.info.run_id),
        seed=int(tags.get("autorl.seed", 0)),
        proposer=tags.get("autorl.proposer", ""),
        commit=tags.get("autorl.git_commit", ""),
        reason=tags.get("autorl.reason", ""),
        val_score=metrics.get("val_score"),
        val_stderr=metrics.get("val_stderr"),
        eval_engine=tags.get("autorl.eval_engine", ""),
        test_score=metrics.get("test_score"),
        test_stderr=metrics.get("test_stderr"),
        train_reward=metrics.get("train_reward"),
        steps=int(metrics.get("steps", 0)),
        step_offset=int(tags.get("autorl.step_offset", 0)),
        seconds=metrics.get("stage_seconds", 0.0),
        rationale=tags.get("autorl.rationale", ""),
        expected_effect=tags.get("autorl.expected_effect", ""),
        edited=tags.get("autorl.edited") == "True",
        optuna_trial=int(tags["autorl.optuna_trial"]) if tags.get("autorl.optuna_trial") else None,
        attempt=_attempt(run),
        decision=decision,
        kept=tags.get("autorl.kept") == "True",
        diagnosis=[Finding.from_dict(f) for f in _loads(tags, "autorl.findings", [], run.info.run_id)],
        comparison=Comparison(**comparison) if comparison else None,
        frozen_violation=tags.get("autorl.frozen_violation") == "True",
        worker=tags.get("autorl.worker", ""),
        timing=_loads(tags, "autorl.timing", {}, run.info.run_id),
        peak_memory_mb=metrics.get("peak_memory_mb"),
        eval_metrics=_loads(tags, "autorl.eval_metrics", {}, run.info.run_id),
    )


# -- the session record ----------------------------------------------------------------------

def session_tags(config: SessionConfig, template_name: str, template_path: str, sandbox_tier: str,
                 workspace_path: str, commit: str) -> dict[str, str]:
    """What a session run's tags hold when it is created."""
    return {
        VERSION_KEY: str(RECORD_VERSION),
        "autorl.topic": config.topic,
        "autorl.template": template_name,
        "autorl.template_path": template_path,
        "autorl.config": config.model_dump_json(),
        "autorl.strategy": config.strategy,
        "autorl.seed": str(config.seed),
        "autorl.sandbox": sandbox_tier,
        "autorl.workspace": workspace_path,
        "mlflow.source.git.commit": commit,
    }


def session_tags_of(run) -> dict[str, str]:
    """A session run's tags under this version's keys, whichever version wrote them."""
    tags = dict(run.data.tags)
    for old, new in RENAMED_SESSION_KEYS.items():
        if old in tags:
            tags.setdefault(new, tags.pop(old))
    return tags


def stored_config(run) -> SessionConfig | None:
    """The config a session was started with (None for no run, or one too old to hold it).
    Options a later version no longer has are left out; a value no version could have
    written is an error naming the run."""
    if run is None or "autorl.config" not in run.data.tags:
        return None
    data = _loads(run.data.tags, "autorl.config", {}, run.info.run_id)
    known = {key: value for key, value in data.items() if key in SessionConfig.model_fields}
    known.setdefault("noise_probe", "off")  # a session started before the probe existed goes on without one
    try:
        return SessionConfig.model_validate(known)
    except ValidationError as exc:
        raise RecordError(f"MLflow run {run.info.run_id}: the stored session config does not load "
                          f"({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}); the record is damaged") from exc
