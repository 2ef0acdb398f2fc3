"""Assembling a session: stores, workspace, frozen guard, proposer, and the controller.

Order matters: the tracking store is created and migrated, and the session name is
checked free, before anything is copied or launched.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from functools import partial

from autorl import hpo
from autorl.budget import Budget
from autorl.config import LLM_STRATEGIES, TREE_STRATEGIES, SessionConfig
from autorl.context import ContextBuilder
from autorl.llm import LLMClient, LLMSettings, ReplyCache, check_price
from autorl.controller import Collaborators, Controller
from autorl.errors import SessionError
from autorl.evaluate import FrozenEvaluator
from autorl.frozen import FrozenGuard
from autorl.observer import Observer
from autorl.policy import BestFirstPolicy
from autorl.proposers import FlatTpeProposer, GreedyProposer, GridProposer, RandomScheduleProposer, TpeProposer
from autorl.proposers.llm import LLMProposer
from autorl.lock import SessionLock
from autorl.cgroups import Limits
from autorl.sandbox import DEFAULT_LIMITS, Sandbox, choose_sandbox
from autorl.tree import Tree
from autorl.stage import StageRunner
from autorl.template import Template
from autorl.tracking import Tracker
from autorl.workspace import Workspace


def new_session_name(topic: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:24].strip("-") or "session"
    return f"{slug}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def make_proposer(config: SessionConfig, template: Template, workspace: Workspace, budget: Budget,
                  api_key: str | None, notify):
    space, depth, seed = template.space, config.max_depth, config.seed
    if config.strategy == "grid":
        return GridProposer(space, depth, seed)
    if config.strategy == "random":
        return RandomScheduleProposer(space, depth, seed)
    if config.strategy == "greedy":
        return GreedyProposer(space, depth, seed)
    study = hpo.open_study(config.runs_dir, config.name, seed)
    if config.strategy == "optuna":
        return FlatTpeProposer(space, depth, study, seed)
    if config.strategy == "tree":
        return TpeProposer(space, study, seed=seed)
    settings = LLMSettings(
        model=config.llm_model, base_url=config.llm_base_url, api_key=api_key, timeout_s=config.llm_timeout_s,
        max_retries=config.llm_retries, max_tokens=config.max_llm_tokens, max_cost=config.max_llm_cost,
    )
    client = LLMClient(settings, cache=ReplyCache(config.session_dir / "llm_replies.jsonl"))
    context = ContextBuilder(template.program, config.topic, template.space, config.session_dir)
    return LLMProposer(
        template.space, client, context, study, workspace=workspace,
        max_depth=config.max_depth, hybrid=config.strategy == "hybrid", budget_text=budget.describe, notify=notify,
    )



def create_session(config: SessionConfig, template: Template, tracker: Tracker,
                   observer: Observer | None = None, api_key: str | None = None) -> Controller:
    tracker.ensure_store()
    if config.strategy in LLM_STRATEGIES:
        check_price(config.llm_model, config.max_llm_cost)
    if tracker.find_session(config.name) is not None or config.session_dir.exists():
        raise SessionError(f"session {config.name!r} already exists in {config.runs_dir}; choose another --name")
    sandbox = choose_sandbox(config.sandbox, trial_limits(config))
    lock = SessionLock(config.session_dir).acquire()
    workspace = Workspace.create(template, config.session_dir / "workspace")
    guard = FrozenGuard.record(workspace.path / "env")
    (config.session_dir / "frozen_hashes.json").write_text(json.dumps(guard.expected, indent=2))
    run_id = tracker.start_session(
        config.name,
        params={**config.model_dump(mode="json"), "template_path": str(template.path)},
        tags={
            "autorl.topic": config.topic,
            "autorl.template": template.name,
            "autorl.template_path": str(template.path),
            "autorl.config": config.model_dump_json(),
            "autorl.strategy": config.strategy,
            "autorl.seed": str(config.seed),
            "autorl.sandbox": sandbox.tier,
            "autorl.workspace": str(workspace.path),
            "mlflow.source.git.commit": workspace.head,
        },
    )
    tracker.log_text(run_id, template.program + f"\n\n## Topic\n\n{config.topic}\n", "program.md")
    tracker.log_artifacts(run_id, [template.path / "space.toml", config.session_dir / "frozen_hashes.json"])
    return assemble(config, template, tracker, run_id, workspace, guard, sandbox, lock,
                    Budget(config.stages, config.time_budget_s), observer, api_key)


def trial_limits(config: SessionConfig) -> Limits:
    return Limits(memory_bytes=int(config.trial_memory_gb * 2**30), pids=DEFAULT_LIMITS.pids)


def assemble(config: SessionConfig, template: Template, tracker: Tracker, run_id: str, workspace: Workspace,
             guard: FrozenGuard, sandbox: Sandbox, lock: SessionLock, budget: Budget,
             observer: Observer | None = None, api_key: str | None = None, tree: Tree | None = None) -> Controller:
    """The controller and its collaborators, for a new session or a resumed one."""
    relay = MessageRelay()
    pristine = template.path / "env"
    parts = Collaborators(
        tracker=tracker,
        workspace=workspace,
        evaluator=FrozenEvaluator(workspace.path, guard, sandbox, pristine_env=pristine),
        runner=StageRunner(workspace.path, sandbox, guard, pristine_env=pristine),
        proposer=make_proposer(config, template, workspace, budget, api_key, relay),
        policy=BestFirstPolicy(config.max_depth, seed=config.seed) if config.strategy in TREE_STRATEGIES else None,
    )
    if isinstance(parts.proposer, LLMProposer):
        parts.proposer.client.tracer = partial(tracker.llm_span, run_id, config.name)
    controller = Controller(config, template, parts, run_id, observer, budget=budget, tree=tree, lock=lock)
    relay.target = controller
    return controller


class MessageRelay:
    """Forwards a proposer's notices to whatever observer the controller has by then."""

    target = None

    def __call__(self, text: str) -> None:
        if self.target is not None:
            self.target.observer.message(text)
