"""Resuming a stopped or killed session from what MLflow holds.

The session run gives the config (tag ``autorl.config``), the base score and the time
and LLM usage spent; its node runs give the tree (the latest attempt of each node);
the Optuna journal, the workspace's git history and the LLM reply cache are reopened
as they are. What was in flight is reconciled: a node run left RUNNING is marked
KILLED, and its stage is scored if it had finished training, else trained again
once (``Controller.reconcile``); an Optuna trial left RUNNING that no node owns is
failed and its values enqueued again. Nothing finished is lost or repeated, and the
budget is charged once per node.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from autorl import hpo
from autorl import template as templates
from autorl.budget import Budget
from autorl.config import SessionConfig
from autorl.controller import Controller
from autorl.errors import SessionError
from autorl.frozen import FrozenGuard
from autorl.lock import SessionLock
from autorl.observer import Observer
from autorl.sandbox import choose_sandbox
from autorl.session import assemble, trial_limits
from autorl.tracking import Tracker
from autorl.tree import Node, Status, Tree
from autorl.workspace import Workspace

TERMINAL = {"succeeded": Status.SUCCEEDED, "failed": Status.FAILED}


def node_from_run(run, session_dir: Path) -> Node:
    tags, metrics = run.data.tags, run.data.metrics
    parent = tags.get("autorl.parent_node", "base")
    finished = run.info.status in ("FINISHED", "FAILED") and tags.get("autorl.status") in TERMINAL
    node = Node(
        id=tags["autorl.node_id"], parent=None if parent == "base" else parent, depth=int(tags["autorl.depth"]),
        hyperparameters=json.loads(tags.get("autorl.hyperparameters", "{}")), seed=int(tags["autorl.seed"]),
        proposer=tags.get("autorl.proposer", ""), commit=tags.get("autorl.git_commit", ""),
        status=TERMINAL[tags["autorl.status"]] if finished else Status.RUNNING,
        reason=tags.get("autorl.reason", "") if finished else "",
        val_score=metrics.get("val_score") if finished else None,
        val_stderr=metrics.get("val_stderr") if finished else None,
        test_score=metrics.get("test_score"), train_reward=metrics.get("train_reward"),
        steps=int(metrics.get("steps", 0)), step_offset=int(tags.get("autorl.step_offset", 0)),
        seconds=metrics.get("stage_seconds", 0.0), mlflow_run_id=run.info.run_id,
    )
    node.extra.update(rationale=tags.get("autorl.rationale", ""), expected_effect=tags.get("autorl.expected_effect", ""),
                      edited=tags.get("autorl.edited") == "True", attempt=int(tags.get("autorl.attempt", 1)))
    if tags.get("autorl.optuna_trial"):
        node.extra["optuna_trial"] = int(tags["autorl.optuna_trial"])
    if tags.get("autorl.kept") == "True":
        node.extra["kept"] = True
    diagnosis = session_dir / "nodes" / node.id / "diagnosis.json"
    if finished and diagnosis.is_file():
        saved = json.loads(diagnosis.read_text())
        node.extra.update(diagnosis=saved.get("findings", []), comparison=saved.get("comparison"))
    return node


def rebuild_tree(tracker: Tracker, session_run, session_dir: Path) -> Tree:
    metrics = session_run.data.metrics
    tree = Tree(base_score=metrics.get("base_score"), base_stderr=metrics.get("base_stderr"))
    for run in tracker.node_runs(session_run.info.run_id):
        tree.add(node_from_run(run, session_dir))
    return tree


def resume_session(name: str, tracker: Tracker, observer: Observer | None = None,
                   api_key: str | None = None) -> Controller | None:
    """A controller that continues session ``name``; None when it had already finished."""
    run = tracker.find_session(name)
    if run is None:
        raise SessionError(f"no session named {name!r} in {tracker.uri}; `autorl ls` lists them")
    tags = run.data.tags
    if "autorl.config" not in tags:
        raise SessionError(f"session {name!r} was made by an older autorl and cannot be resumed")
    config = SessionConfig.model_validate_json(tags["autorl.config"])
    lock = SessionLock(config.session_dir).acquire()
    run = tracker.find_session(name)  # read again under the lock
    if run.data.tags.get("autorl.status") == "finished":
        lock.release()
        return None
    template = templates.load(run.data.tags["autorl.template_path"])
    workspace = Workspace(config.session_dir / "workspace")
    guard = FrozenGuard(workspace.path / "env", json.loads((config.session_dir / "frozen_hashes.json").read_text()))
    tree = rebuild_tree(tracker, run, config.session_dir)
    budget = Budget(config.stages, config.time_budget_s, spent_stages=len(tree.nodes))
    budget.started = time.monotonic() - run.data.metrics.get("session_seconds", 0.0)
    tracker.reopen_session(run.info.run_id, resumes=int(tags.get("autorl.resumes", 0)) + 1)
    controller = assemble(config, template, tracker, run.info.run_id, workspace, guard, choose_sandbox(config.sandbox, trial_limits(config)),
                          lock, budget, observer, api_key, tree=tree)
    restore_search_state(controller, run)
    return controller


def restore_search_state(controller: Controller, session_run) -> None:
    proposer, tree = controller.parts.proposer, controller.tree
    study = getattr(proposer, "study", None)
    if study is not None:
        owned = {n.extra["optuna_trial"] for n in tree.nodes.values() if "optuna_trial" in n.extra}
        hpo.fail_orphan_trials(study, owned)
    if hasattr(proposer, "restore"):
        proposer.restore(tree)
    client = getattr(proposer, "client", None)
    if client is not None:
        client.usage.restore(session_run.data.metrics)
    controller.dropped_proposals = int(session_run.data.metrics.get("llm_dropped_proposals", 0))
