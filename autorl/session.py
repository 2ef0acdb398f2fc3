"""Assembling a session: stores, workspace, frozen guard, proposer, and the controller.

Order matters: the tracking store is created and migrated, and the session name is
checked free, before anything is copied or launched.
"""

from __future__ import annotations

import json
import re
import secrets
import time

from autorl import hpo
from autorl.config import SessionConfig
from autorl.controller import Collaborators, Controller
from autorl.errors import SessionError
from autorl.evaluate import FrozenEvaluator
from autorl.frozen import FrozenGuard
from autorl.observer import Observer
from autorl.policy import BestFirstPolicy
from autorl.proposers import RandomProposer, TpeProposer
from autorl.stage import StageRunner
from autorl.template import Template
from autorl.tracking import Tracker
from autorl.workspace import Workspace


def new_session_name(topic: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:24].strip("-") or "session"
    return f"{slug}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def make_proposer(config: SessionConfig, template: Template):
    if config.strategy == "random":
        return RandomProposer(template.space, seed=config.seed)
    study = hpo.open_study(config.runs_dir, config.name, config.seed)
    return TpeProposer(template.space, study)


def create_session(config: SessionConfig, template: Template, tracker: Tracker,
                   observer: Observer | None = None) -> Controller:
    tracker.ensure_store()
    if tracker.find_session(config.name) is not None or config.session_dir.exists():
        raise SessionError(f"session {config.name!r} already exists in {config.runs_dir}; choose another --name")
    workspace = Workspace.create(template, config.session_dir / "workspace")
    guard = FrozenGuard.record(workspace.path / "env")
    (config.session_dir / "frozen_hashes.json").write_text(json.dumps(guard.expected, indent=2))
    parts = Collaborators(
        tracker=tracker,
        workspace=workspace,
        evaluator=FrozenEvaluator(workspace.path, guard),
        runner=StageRunner(workspace.path),
        proposer=make_proposer(config, template),
        policy=BestFirstPolicy(config.max_depth, seed=config.seed),
    )
    run_id = tracker.start_session(
        config.name,
        params={**config.model_dump(mode="json"), "template_path": str(template.path)},
        tags={
            "autorl.topic": config.topic,
            "autorl.template": template.name,
            "autorl.strategy": config.strategy,
            "autorl.seed": str(config.seed),
            "autorl.workspace": str(workspace.path),
            "mlflow.source.git.commit": workspace.head,
        },
    )
    tracker.log_text(run_id, template.program + f"\n\n## Topic\n\n{config.topic}\n", "program.md")
    tracker.log_artifacts(run_id, [template.path / "space.toml", config.session_dir / "frozen_hashes.json"])
    return Controller(config, template, parts, run_id, observer)
