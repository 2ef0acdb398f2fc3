"""The node record in MLflow: one codec, used by the controller (writing), resume and
report (reading), so what is written is exactly what is read back.

A node run carries its identity and outcome as tags (``autorl.*``), its scores and
sizes as metrics, and its hyperparameters both as params (for MLflow's UI) and as one
JSON tag (exact types, for the round trip). Diagnosis and comparison travel as JSON
tags too, so a tree rebuilt from the store alone is the tree the search saw.
"""

from __future__ import annotations

import json
from typing import Any

from autorl.config import SessionConfig
from autorl.errors import RecordError
from search.tree import Comparison, Decision, Finding, Node, Status

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
    """Everything about a node that is not a metric, as MLflow tags."""
    tags: dict[str, Any] = {
        "autorl.node_id": node.id,
        "autorl.parent_node": node.parent or "base",
        "autorl.depth": node.depth,
        "autorl.status": node.status.value,
        "autorl.reason": node.reason,
        "autorl.proposer": node.proposer,
        "autorl.seed": node.seed,
        "autorl.step_offset": node.step_offset,
        "autorl.git_commit": node.commit,
        "mlflow.source.git.commit": node.commit,
        "autorl.hyperparameters": dumps(node.hyperparameters),
        "autorl.rationale": node.rationale,
        "autorl.expected_effect": node.expected_effect,
        "autorl.edited": node.edited,
        "autorl.attempt": node.attempt,
        "autorl.kept": node.kept,
        "autorl.frozen_violation": node.frozen_violation,
        "autorl.diagnosis": ",".join(f.name for f in node.diagnosis),  # names, for filtering in MLflow's UI
        "autorl.findings": dumps([f.to_dict() for f in node.diagnosis]),
        "autorl.comparison": dumps(node.comparison.to_dict()) if node.comparison else "",
        "autorl.verdict": node.comparison.verdict if node.comparison else "",
        "autorl.eval_engine": node.eval_engine,
        "autorl.worker": node.worker,
        "autorl.timing": dumps(node.timing) if node.timing else "",
        "autorl.eval_metrics": dumps(node.eval_metrics) if node.eval_metrics else "",
    }
    if node.optuna_trial is not None:
        tags["autorl.optuna_trial"] = node.optuna_trial
    if node.decision is not None:
        tags.update({"autorl.decision": node.decision.action, "autorl.decided_by": node.decision.decided_by,
                     "autorl.decision_reason": node.decision.reason})
    return {key: str(value) for key, value in tags.items()}


def node_metrics(node: Node) -> dict[str, float]:
    values = {"stage_seconds": node.seconds, "steps": node.steps}
    if node.scored:
        values.update(val_score=node.val_score, val_stderr=node.val_stderr)
    if node.train_reward is not None:
        values["train_reward"] = node.train_reward
    if node.peak_memory_mb is not None:
        values["peak_memory_mb"] = node.peak_memory_mb
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
    """The node a run records (its latest attempt); scores only when the stage ended."""
    tags, metrics = run.data.tags, run.data.metrics
    status = decode_status(run)
    finished = status in TERMINAL.values()
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
        status=status,
        reason=tags.get("autorl.reason", "") if finished else "",
        val_score=metrics.get("val_score") if finished else None,
        val_stderr=metrics.get("val_stderr") if finished else None,
        eval_engine=tags.get("autorl.eval_engine", "") if finished else "",
        test_score=metrics.get("test_score"),
        test_stderr=metrics.get("test_stderr"),
        train_reward=metrics.get("train_reward"),
        steps=int(metrics.get("steps", 0)),
        step_offset=int(tags.get("autorl.step_offset", 0)),
        seconds=metrics.get("stage_seconds", 0.0),
        mlflow_run_id=run.info.run_id,
        rationale=tags.get("autorl.rationale", ""),
        expected_effect=tags.get("autorl.expected_effect", ""),
        edited=tags.get("autorl.edited") == "True",
        optuna_trial=int(tags["autorl.optuna_trial"]) if tags.get("autorl.optuna_trial") else None,
        attempt=int(tags.get("autorl.attempt", 1)),
        decision=decision,
        kept=tags.get("autorl.kept") == "True",
        diagnosis=([Finding.from_dict(f) for f in _loads(tags, "autorl.findings", [], run.info.run_id)]
                   if finished else []),
        comparison=Comparison(**comparison) if comparison and finished else None,
        frozen_violation=tags.get("autorl.frozen_violation") == "True",
        worker=tags.get("autorl.worker", ""),
        timing=_loads(tags, "autorl.timing", {}, run.info.run_id),
        peak_memory_mb=metrics.get("peak_memory_mb"),
        eval_metrics=_loads(tags, "autorl.eval_metrics", {}, run.info.run_id) if finished else {},
    )


def stored_config(run) -> SessionConfig | None:
    """The config a session was started with (None for no run, or one too old to hold it)."""
    if run is None or "autorl.config" not in run.data.tags:
        return None
    return SessionConfig.model_validate_json(run.data.tags["autorl.config"])
