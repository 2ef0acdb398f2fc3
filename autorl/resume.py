"""Resuming a stopped or killed session from what MLflow holds.

The session run gives the config (tag ``autorl.config``), the base score and the time
and LLM usage spent; its node runs give the tree (the latest attempt of each node);
the Optuna journal, the workspace's git history and the LLM reply cache are reopened
as they are, or, when the session folder is gone or the session moves to another
runs directory or machine, rebuilt from MLflow first (autorl/storage/session_files.py).
What was in flight is reconciled: a node run left RUNNING is marked KILLED, and its
stage is scored if it had finished training, else trained again once
(``autorl/loop/reconcile.py``); an Optuna trial left RUNNING that no node owns is
failed and its values enqueued again. Nothing finished is lost or repeated, and the
budget is charged once per node.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from autorl.config import SessionConfig
from autorl.errors import SessionError
from autorl.loop.approval import Gate
from autorl.loop.budget import Budget, session_budget
from autorl.loop.controller import Controller
from autorl.loop.goals import Goals
from autorl.loop.observer import Observer
from autorl.session import CREATING, Stores, assemble, check_llm, make_sandbox, session_journal, session_noise
from autorl.stages import template as templates
from autorl.stages.frozen import FrozenGuard
from autorl.stages.workspace import Workspace
from autorl.storage import session_files
from autorl.storage.earlier_sessions import Memory
from autorl.storage.lock import SessionLock
from autorl.storage.records import nodes_from_runs, session_tags_of, stored_config
from autorl.storage.session_files import SessionFiles
from autorl.storage.tracking import Tracker
from search.tree import Status, Tree


def rebuild_tree(tracker: Tracker, session_run) -> Tree:
    metrics = session_run.data.metrics
    tree = Tree(base_score=metrics.get("base_score"), base_stderr=metrics.get("base_stderr"))
    for node in nodes_from_runs(tracker.node_runs(session_run.info.run_id)):
        tree.add(node)
    return tree


def restore_spending(budget: Budget, tree: Tree, template) -> None:
    """What the session spent before the stop: every node launched is a stage; an ended
    stage cost what it trained, one that will run again reserves what it plans."""
    budget.spent_stages = len(tree.nodes)
    for node in tree.nodes.values():
        if node.status in (Status.SUCCEEDED, Status.FAILED):
            budget.spent_train_steps += node.steps
        else:
            budget.reserve(node.id, template.stage_steps(node.hyperparameters))


def never_created(name: str, run) -> str | None:
    """What to do about a session whose creation was killed before its run held its config."""
    folder = session_folder(run)
    if folder is not None and (folder / CREATING).exists():
        return (f"session {name!r} was stopped while it was being created; start it again with "
                f"`autorl research TOPIC --name {name}`")
    return None


def session_folder(run) -> Path | None:
    """The session's folder, from the runs directory its params name."""
    runs_dir = run.data.params.get("runs_dir")
    return Path(runs_dir) / "sessions" / run.data.tags.get("autorl.session", "") if runs_dir else None


def session_template(run) -> templates.Template:
    """The template a session ran: at its recorded path, else (another machine, a moved
    checkout) the built-in of the same name; the frozen hashes then say if it is the same."""
    tags = session_tags_of(run)
    path = Path(tags["autorl.template_path"])
    if path.is_dir():
        return templates.load(str(path))
    if tags.get("autorl.template") in templates.builtin_names():
        return templates.load(tags["autorl.template"])
    raise SessionError(f"the session's template {path} is not on this machine; copy it to that path to resume")


def here(config: SessionConfig, runs_dir: Path | None, tracking_uri: str) -> SessionConfig:
    """The stored config with this machine's runs directory (its cache) and store."""
    if runs_dir is None:
        return config
    return config.model_copy(update={"runs_dir": runs_dir, "tracking_uri": tracking_uri})


def resume_session(name: str, tracker: Tracker, *, observer: Observer | None = None, gate: Gate | None = None,
                   api_key: str | None = None, approve: str | None = None, parallel: int | None = None,
                   runs_dir: Path | None = None) -> Controller | None:
    """A controller that continues session ``name``; None when it had already finished.
    ``approve`` and ``parallel`` change the stored approval mode and stages at once (and
    are stored in their place, once the session is ours and its LLM answers). ``runs_dir``
    is where its folder is (rebuilt from MLflow when it is empty or elsewhere)."""
    run = tracker.find_session(name)
    if run is None:
        raise SessionError(f"no session named {name!r} in {tracker.uri}; `autorl ls` lists them")
    stored = stored_config(run)
    if stored is None:
        raise SessionError(never_created(name, run) or
                           f"session {name!r} was made by an autorl too old to store its config and cannot be "
                           "resumed; start a new session")
    changes = {key: value for key, value in (("approve", approve), ("parallel", parallel))
               if value is not None and value != getattr(stored, key)}
    config = here(stored, runs_dir, tracker.uri).model_copy(update=changes)
    lock = SessionLock(config.session_dir).acquire()
    try:
        controller = resume_locked(name, tracker, config, stored, lock, observer=observer, gate=gate, api_key=api_key)
    except BaseException:
        lock.release()
        raise
    if controller is None:
        lock.release()
    return controller


def resume_locked(name: str, tracker: Tracker, config: SessionConfig, stored: SessionConfig, lock: SessionLock, *,
                  observer: Observer | None, gate: Gate | None, api_key: str | None) -> Controller | None:
    (config.session_dir / CREATING).unlink(missing_ok=True)  # killed after its run existed: created enough
    run = tracker.find_session(name)  # read again under the lock
    tags = run.data.tags
    if tags.get("autorl.status") == "finished":
        return None
    if tags.get("autorl.resumable") == "no":
        raise SessionError(f"session {name!r} can never finish ({tags.get('autorl.reason', '')}); "
                           "start a new session")
    check_llm(config, api_key, observer)  # before anything changes: an LLM that cannot serve it is one error
    if config != stored:
        tracker.set_tags(run.info.run_id, {"autorl.config": config.model_dump_json()})
    template = session_template(run)
    tree = rebuild_tree(tracker, run)
    restored = session_files.restore(tracker, run, config.session_dir, template, session_journal(config),
                                     {node.id: node.mlflow_run_id for node in tree.nodes.values()})
    if restored and observer is not None:
        observer.message(f"rebuilt the session folder from MLflow: {', '.join(restored)}")
    workspace = Workspace(config.session_dir / "workspace")
    guard = FrozenGuard(workspace.path / "env", json.loads((config.session_dir / "frozen_hashes.json").read_text()))
    noise = session_noise(config, template, Memory.load(config.session_dir))  # memory.json, restored above
    budget = session_budget(config, template, Goals(config.target, config.patience, noise))
    restore_spending(budget, tree, template)
    budget.started = time.monotonic() - run.data.metrics.get("session_seconds", 0.0)
    tracker.reopen_session(run.info.run_id, resumes=int(tags.get("autorl.resumes", 0)) + 1)
    files = SessionFiles(tracker, run.info.run_id, config.session_dir, session_journal(config))
    stores = Stores(tracker, run.info.run_id, workspace, guard, make_sandbox(config, template), lock, files)
    controller = assemble(config, template, stores, budget, observer=observer, gate=gate, api_key=api_key, tree=tree)
    controller.parts.proposer.restore(tree, run.data.metrics)
    controller.review.rejected = int(run.data.metrics.get("rejected_proposals", 0))
    return controller
