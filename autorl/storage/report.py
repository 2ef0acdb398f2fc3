"""Reading sessions back from MLflow: the ``ls`` rows and the ``show`` tree.

Everything here comes from the tracking store, not from memory, so ``show`` tells
what a later process (or a resumed session) would see.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autorl.errors import SessionError
from autorl.storage.lock import SessionLock
from autorl.storage.records import nodes_from_runs, session_tags_of
from autorl.storage.session_files import MEMORY_TAG, NOISE_TAG
from autorl.storage.tracking import Tracker
from search.tree import Node


def node_view(node: Node, mlflow_status: str) -> dict[str, Any]:
    """A node as ``show --json`` prints it: the decoded record plus MLflow's own run status,
    and when its stage started and ended (UTC), so stages run side by side can be checked."""
    data = node.to_dict()
    timing = data.get("timing") or {}
    return data | {"mlflow_status": mlflow_status, "started_at": timing.get("started_at"),
                   "ended_at": timing.get("ended_at")}


COUNTERS = ("near_duplicates", "known_failures_refused", "dropped_proposals", "rejected_proposals")


def session_summary(run) -> dict[str, Any]:
    tags, metrics = session_tags_of(run), run.data.metrics
    return {
        "name": tags.get("autorl.session"),
        "status": tags.get("autorl.status"),
        "reason": tags.get("autorl.reason", ""),
        "topic": tags.get("autorl.topic"),
        "template": tags.get("autorl.template"),
        "strategy": tags.get("autorl.strategy"),
        "base_score": metrics.get("base_score"),
        "base_stderr": metrics.get("base_stderr"),
        "best_val_score": metrics.get("best_val_score"),
        "best_test_score": metrics.get("best_test_score"),
        "best_test_stderr": metrics.get("best_test_stderr"),
        "base_test_score": metrics.get("base_test_score"),
        "seconds": metrics.get("session_seconds"),
        "productive_seconds": metrics.get("productive_seconds"),
        "overhead_share": metrics.get("overhead_share"),
        "stages_spent": int(metrics.get("stages_spent", 0)),
        "train_steps_spent": int(metrics.get("train_steps_spent", 0)),
        "started": run.info.start_time,
        "mlflow_run_id": run.info.run_id,
        "counters": {k: v for k, v in metrics.items() if k.startswith("llm_") or k in COUNTERS},
        "importance": json.loads(tags.get("autorl.importance") or "null"),
        "memory": tags.get(MEMORY_TAG),  # what it read of earlier sessions on its template (None: before memory)
        "seed_noise": tags.get(NOISE_TAG),  # the seed-to-seed spread its verdicts count (None: before it was said)
    }


def resumable(run) -> tuple[bool, str]:
    """Whether ``autorl resume`` can continue a session, and why (not). Its folder is not
    needed (resume rebuilds it from MLflow); a live controller is seen through the lock in
    the folder it runs from."""
    tags = run.data.tags
    status = tags.get("autorl.status")
    if status == "finished":
        return False, "finished"
    if "autorl.config" not in tags:
        return False, "made by an older autorl"
    session_dir = Path(json.loads(tags["autorl.config"])["runs_dir"]) / "sessions" / tags["autorl.session"]
    if session_dir.is_dir() and SessionLock(session_dir).held_elsewhere():
        return False, "running (a live controller holds it)"
    if status == "running":
        return True, "controller died" if session_dir.is_dir() else "controller died, or runs on another machine"
    if tags.get("autorl.resumable") == "no":
        return False, f"can never finish: {tags.get('autorl.reason', '')}"
    return True, f"{status}: {tags.get('autorl.reason', '')}".strip(": ")


def list_sessions(tracker: Tracker) -> list[dict[str, Any]]:
    rows = []
    for run in tracker.sessions():
        can, why = resumable(run)
        rows.append(session_summary(run) | {"resumable": can, "resume_note": why})
    return rows


def show_session(tracker: Tracker, name: str) -> dict[str, Any]:
    run = tracker.find_session(name)
    if run is None:
        raise SessionError(f"no session named {name!r} in {tracker.uri}; `autorl ls` lists them")
    summary = session_summary(run)
    runs = tracker.node_runs(run.info.run_id)
    status_of = {r.info.run_id: r.info.status for r in runs}
    nodes = [node_view(node, status_of[node.mlflow_run_id]) for node in nodes_from_runs(runs)]
    best_id = run.data.tags.get("autorl.best_node")
    scored = [n for n in nodes if n["val_score"] is not None]
    best = next((n for n in nodes if n["id"] == best_id), None) or (
        max(scored, key=lambda n: n["val_score"]) if scored else None
    )
    summary["nodes"] = nodes
    summary["best"] = None if best is None else {**best, "path": path_to(nodes, best["id"]),
                                                 "path_steps": best.get("step_offset", 0) + best.get("steps", 0)}
    summary["beats_base"] = beats_base(best and best["val_score"], summary.get("base_score"))
    summary["workspace"] = session_tags_of(run).get("autorl.workspace")
    return summary


def beats_base(best_val: float | None, base_val: float | None) -> bool | None:
    """Whether the best stage scored above the base model on validation (None: unknown).
    When none did, the base model is still the best checkpoint the session has, and every
    view says so rather than presenting a worse stage as the winner.

    >>> beats_base(0.512, 0.528), beats_base(0.61, 0.528), beats_base(None, 0.528)
    (False, True, None)
    """
    if best_val is None or base_val is None:
        return None
    return best_val > base_val


NO_GAIN = "no stage beat the base model on validation: the base model is still the best checkpoint"


def path_share(path_steps: int, spent: int | None) -> str:
    """How much of the spent budget trained the winner: the result is one path, and the steps
    off it bought evidence, not score (``--strategy defaults`` spends them all on one path).

    >>> path_share(80, 160)
    'its path trained 80 of the 160 GRPO steps spent'
    """
    return f"its path trained {path_steps} of the {spent} GRPO steps spent" if spent else ""


def path_to(nodes: list[dict], node_id: str) -> list[str]:
    by_id = {n["id"]: n for n in nodes}
    path, current = [], node_id
    while current is not None:
        path.append(current)
        current = by_id[current]["parent"]
    return path[::-1]
