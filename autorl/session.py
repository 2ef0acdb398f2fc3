"""Assembling a session: stores, workspace, frozen guard, proposer, and the controller.

Order matters: the tracking store is created and migrated, and the session name is
checked free, before anything is copied or launched.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from typing import Callable

from autorl import faults
from autorl.analysis.curves import curves_text, read_records, summarise_curves
from autorl.analysis.noise import paired_comparison
from autorl.config import LLM_STRATEGIES, TREE_STRATEGIES, SessionConfig
from autorl.errors import ConfigError, SessionError
from autorl.loop.approval import Gate
from autorl.loop.budget import Budget, session_budget
from autorl.loop.channel import Channel, ChannelObserver
from autorl.loop.collaborators import Collaborators
from autorl.loop.controller import Controller
from autorl.loop.goals import Goals
from autorl.loop.lifecycle import validation_items
from autorl.loop.noise_probe import probe_wanted
from autorl.loop.observer import Observer, Observers
from autorl.stages import remote_stage
from autorl.stages.evaluate import FrozenEvaluator
from autorl.stages.executor import Executor, LocalStages, RayExecutor
from autorl.stages.frozen import FrozenGuard
from autorl.stages.ray_stages import RayStages, reach
from autorl.stages.stage import StageRunner
from autorl.stages.template import Template
from autorl.stages.workers import worker_plan
from autorl.stages.workspace import Workspace
from autorl.storage import records
from autorl.storage.earlier_sessions import FINGERPRINT_TAG, Memory, read_memory, template_fingerprint
from autorl.storage.lock import SessionLock
from autorl.storage.session_files import SessionFiles
from autorl.storage.tracking import Tracker, remember_store
from autorl.trainer_options import edit_options_text
from autorl.views.session_report import report_session
from sandbox import DEFAULT_LIMITS, Limits, Sandbox, WorkerPlan, choose_sandbox, select_gpus
from search import study as optuna_study
from search.context import ContextBuilder
from search.earlier import warm_start
from search.errors import LLMSetupError
from search.llm import LLMClient, LLMSettings, ReplyCache, check_endpoint, check_price
from search.policy import BestFirstPolicy
from search.proposers import (
    DefaultsProposer,
    FlatTpeProposer,
    GreedyProposer,
    GridProposer,
    Guarded,
    LLMProposer,
    PbtProposer,
    Proposer,
    RandomScheduleProposer,
    TpeProposer,
)
from search.seed_noise import Noise, Repeat
from search.steering import STEP
from search.tree import Comparison, Tree


def new_session_name(topic: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", topic.lower()).strip("-")[:24].strip("-") or "session"
    return f"{slug}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def make_proposer(config: SessionConfig, template: Template, workspace: Workspace, budget: Budget,
                  api_key: str | None, notify, tracer=None) -> Proposer:
    """The proposer for ``config.strategy`` (its ``name`` is the strategy's name), behind the
    checks every proposal passes (search/proposers/guard.py): novelty for all, the memory
    of collapses for autorl's own strategies (the baselines run as published)."""
    strategy = strategy_proposer(config, template, workspace, budget, api_key, notify, tracer)
    remember = config.strategy in TREE_STRATEGIES and "memory" not in config.ablate
    return Guarded(strategy, template.space, remember=remember)


def tpe_options(config: SessionConfig) -> dict:
    """The tree search's switches (``--schedule-prior``, ``--ablate``) as TpeProposer arguments."""
    return {"steer": "steering" not in config.ablate, "avoid_collapses": "memory" not in config.ablate,
            "step": 1.0 if "steering-step" in config.ablate else STEP, "schedule_prior": config.schedule_prior,
            "local": config.local_steps}


def strategy_proposer(config: SessionConfig, template: Template, workspace: Workspace, budget: Budget,
                      api_key: str | None, notify, tracer=None) -> Proposer:
    space, depth, seed = template.space, config.max_depth, config.seed
    if config.strategy == "grid":
        return GridProposer(space, depth, seed)
    if config.strategy == "random":
        return RandomScheduleProposer(space, depth, seed)
    if config.strategy == "greedy":
        return GreedyProposer(space, depth, seed)
    if config.strategy == "pbt":
        return PbtProposer(space, seed=seed)
    if config.strategy == "defaults":
        return DefaultsProposer(space, depth, seed)
    study = optuna_study.open_study(study_folder(config), config.name, seed, config.study_storage)
    if config.strategy == "optuna":
        return FlatTpeProposer(space, depth, study, seed)  # its trials are whole schedules, not stages
    memory = Memory.load(config.session_dir)
    warm_start(study, memory.trials, space)  # what earlier sessions measured, for TPE as for the LLM
    if config.strategy == "tree":
        return TpeProposer(space, study, seed=seed, **tpe_options(config))
    client = LLMClient(llm_settings(config, api_key), cache=ReplyCache(config.session_dir / "llm_replies.jsonl"),
                       tracer=tracer, notify=notify)
    nodes = config.session_dir / "nodes"
    hybrid = config.strategy == "hybrid"
    context = ContextBuilder(
        template.program, config.topic, template.space,
        curves=lambda node_id: curves_text(summarise_curves(read_records(nodes / node_id / "metrics.jsonl"))),
        train_py=workspace.train_script_at(workspace.root_commit), diff=cache(workspace.diff_from_template),
        noise=budget.goals.noise, max_depth=config.max_depth, hybrid=hybrid,
        max_tokens=config.llm_prompt_tokens,
        train_size=template.constants.get("stage", {}).get("train_size"),
        completions_per_step=template.constants.get("stage", {}).get("completions_per_step"),
        trl_version=metadata.version("trl"),  # read here: search/ never imports trl
        edit_options=edit_options_text(workspace.train_script_at(workspace.root_commit)),
        policy=tree_policy(config),  # the one assemble() builds, to say why it picked what it did
        memory=memory.prompt_text(),
        pair=pair_on_items(nodes),
    )
    return LLMProposer(
        template.space, client, context, study, workspace=workspace, hybrid=hybrid,
        budget_text=budget.for_proposer, notify=notify, seed=seed,
    )


def tree_policy(config: SessionConfig) -> BestFirstPolicy:
    """The policy that picks each stage's parent (tree) or suggests it (LLM). A model chooses
    its roots itself: under the fresh-roots rule its second suggested parent was always a root."""
    return BestFirstPolicy(config.max_depth, seed=config.seed, budget_aware="budget" not in config.ablate,
                           leaf_width=config.leaf_width, min_roots=1 if config.strategy in LLM_STRATEGIES else 2)


def pair_on_items(nodes: Path) -> Callable[[str, str], Comparison | None]:
    """Node ``a`` minus node ``b`` on the validation items both were scored on (None: the
    items of one are not at hand). A scored node's items never change: each file is read once."""
    read: dict[str, list[dict]] = {}

    def items(node_id: str) -> list[dict]:
        if node_id not in read and (found := validation_items(nodes / node_id)):
            read[node_id] = found
        return read.get(node_id, [])

    return lambda a, b: paired_comparison(items(a), items(b))


def llm_settings(config: SessionConfig, api_key: str | None) -> LLMSettings:
    return LLMSettings(
        model=config.llm_model, base_url=config.llm_base_url, api_key=api_key, timeout_s=config.llm_timeout_s,
        max_retries=config.llm_retries, max_tokens=config.max_llm_tokens, max_cost=config.max_llm_cost,
        seed=config.seed, reasoning_effort=config.llm_reasoning_effort,
    )


def check_llm(config: SessionConfig, api_key: str | None, observer: Observer | None = None) -> None:
    """An LLM strategy's endpoint must serve the session before it exists (or is resumed): one
    request of a few tokens (search/llm.py: check_endpoint). What keeps it from serving is one
    error, and nothing is created; with ``--llm-fallback optuna`` a warning, and Optuna proposes
    while the endpoint fails, as each proposal finds out."""
    if config.strategy not in LLM_STRATEGIES:
        return
    check_price(config.llm_model, config.max_llm_cost)  # local, and before a request is paid
    problem = check_endpoint(llm_settings(config, api_key))
    if problem is None:
        return
    if config.llm_fallback != "optuna":
        raise LLMSetupError(problem)
    (observer or Observer()).message(f"{problem}: proposing with optuna while it fails (--llm-fallback optuna)")


def template_noise(template: Template) -> Noise:
    """The seed-to-seed spread of one stage, as the template states it (or none)."""
    if not template.stage_sd:
        return Noise()
    return Noise(template.stage_sd, template.stage_sd_source or "measured for this template")


def session_noise(config: SessionConfig, template: Template, memory: Memory) -> Noise:
    """The seed-to-seed spread of one stage: as the template states it, else what earlier
    sessions' repeats measured (``memory``), else what this session's probe will measure."""
    if template.stage_sd:
        return template_noise(template)
    earlier = [Repeat.from_dict(r) for r in memory.repeats]
    return Noise(earlier=earlier, probing=probe_wanted(config) and not earlier)


def study_folder(config: SessionConfig) -> Path:
    """The folder of the session's Optuna journal: its own folder (a cache, the journal is
    kept in MLflow too), or, for a session made before record version 4, the runs
    directory's shared journal, which holds its study."""
    shared = config.runs_dir / optuna_study.JOURNAL
    if shared.is_file() and optuna_study.holds_study(config.runs_dir, config.name):
        return config.runs_dir
    return config.session_dir


def session_journal(config: SessionConfig) -> Path | None:
    """The journal file a session keeps in MLflow (None when its study is in a database)."""
    return None if config.study_storage else study_folder(config) / optuna_study.JOURNAL


@dataclass
class Stores:
    """What a session has open before its controller exists: the same for a new and a resumed one."""

    tracker: Tracker
    run_id: str
    workspace: Workspace
    guard: FrozenGuard
    sandbox: Sandbox
    lock: SessionLock
    files: SessionFiles


CREATING = ".creating"  # in a session folder whose creation has not finished


def reserve_session_dir(config: SessionConfig) -> SessionLock:
    """Take the session's name on disk (mkdir is atomic) and hold its lock.

    A folder still marked CREATING whose lock is free was left by a creation that was
    killed before its MLflow run existed: it never became a session, so it is cleared
    and the name taken again.
    """
    folder = config.session_dir
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        if not (folder / CREATING).exists():
            raise SessionError(f"session folder {folder} already exists; choose another --name") from None
        lock = SessionLock(folder).acquire()  # fails while another process is still creating it
        for child in folder.iterdir():
            if child.name != "controller.lock":
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        (folder / CREATING).touch()
        return lock
    lock = SessionLock(folder).acquire()
    (folder / CREATING).touch()
    return lock


def check_study_storage(config: SessionConfig) -> None:
    """A shared study database must answer before the session exists."""
    if config.study_storage is None:
        return
    try:
        optuna_study.open_storage(config.runs_dir, config.study_storage)
    except Exception as exc:  # SQLAlchemy raises many kinds: a missing driver, a refused connection, bad credentials
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--study-storage: cannot open {config.study_storage}: {message}; start it "
                          "(`autorl server up`) or pass another") from exc


def create_session(config: SessionConfig, template: Template, tracker: Tracker, *, observer: Observer | None = None,
                   gate: Gate | None = None, api_key: str | None = None) -> Controller:
    """A new session, made so that a kill at any point leaves either nothing that counts
    (a folder marked CREATING, cleared by the next use of the name, with the run it may
    have got discarded) or a resumable session."""
    check_study_storage(config)  # before the store: a refusal leaves nothing behind
    check_llm(config, api_key, observer)  # the same: an LLM that cannot serve the session is one error
    if config.executor == "ray":
        reach(config.ray_address)  # the same: an unreachable cluster is one error, and nothing is created
    tracker.ensure_store()
    if config.strategy in LLM_STRATEGIES:
        check_price(config.llm_model, config.max_llm_cost)
    existing = tracker.find_session(config.name)
    if existing is not None and not (config.session_dir / CREATING).exists():
        raise SessionError(f"session {config.name!r} already exists in {config.runs_dir}; choose another --name")
    sandbox = make_sandbox(config, template)
    lock = reserve_session_dir(config)
    if existing is not None:  # its creation was killed after its run existed: it never became a session
        tracker.discard(existing.info.run_id)
    faults.point("session_reserved")
    workspace = Workspace.create(template, config.session_dir / "workspace")
    guard = FrozenGuard.record(workspace.path / "env")
    (config.session_dir / "frozen_hashes.json").write_text(json.dumps(guard.expected, indent=2))
    remember_store(config.session_dir, tracker.uri)  # show, resume, report and tui find it from the runs directory
    faults.point("workspace_made")
    fingerprint = template_fingerprint(guard.expected, (template.path / "space.toml").read_text())
    run_id = tracker.start_session(
        config.name,
        params={**config.model_dump(mode="json"), "template_path": str(template.path)},
        tags={**records.session_tags(config, template.name, str(template.path), sandbox.tier, str(workspace.path),
                                     workspace.head), FINGERPRINT_TAG: fingerprint},
    )
    faults.point("session_run_created")
    tracker.log_text(run_id, template.program + f"\n\n## Topic\n\n{config.topic}\n", "program.md")
    tracker.log_artifacts(run_id, [template.path / "space.toml", config.session_dir / "frozen_hashes.json"])
    files = SessionFiles(tracker, run_id, config.session_dir, session_journal(config))
    files.save_workspace(workspace.path)
    memory = (read_memory(tracker, fingerprint, template.space, run_id, config.seed) if config.memory == "on"
              else Memory("off"))
    files.save_memory(memory)
    (config.session_dir / CREATING).unlink()
    stores = Stores(tracker, run_id, workspace, guard, sandbox, lock, files)
    noise = session_noise(config, template, memory)
    budget = session_budget(config, template, Goals(config.target, config.patience, noise))
    return assemble(config, template, stores, budget, observer=observer, gate=gate, api_key=api_key)


def trial_limits(config: SessionConfig, template: Template | None = None) -> Limits:
    return Limits(memory_bytes=int(config.trial_memory_gb * 2**30), pids=DEFAULT_LIMITS.pids,
                  cpus=trial_cpus(config, template))


def trial_cpus(config: SessionConfig, template: Template | None = None) -> float | None:
    """CPUs per trial: ``--trial-cpus``, else the template's ``[stage] cpus``, else with
    ``--parallel N`` the machine's shared out (trials side by side that each spawn a
    thread per core would fight over them), else all of them."""
    if config.trial_cpus is not None:
        return config.trial_cpus
    if template is not None and template.stage_cpus is not None:
        return template.stage_cpus
    if config.parallel == 1:
        return None
    return float(max(1, (os.cpu_count() or 1) // config.parallel))


def make_sandbox(config: SessionConfig, template: Template | None = None) -> Sandbox:
    """The strongest tier asked for, with the session's GPUs (a GPU that is not there is an error)."""
    return choose_sandbox(config.sandbox, trial_limits(config, template), gpus=select_gpus(config.gpus))


def open_channel(config: SessionConfig, template: Template, gate: Gate | None) -> Channel:
    """The session's channel, described for viewers that attach (`autorl tui NAME`)."""
    channel = Channel.open(config.session_dir)
    channel.set_paused(False)  # a pause belongs to the run that was paused, not to a resumed one
    channel.describe_session(name=config.name, strategy=config.strategy, approve=gate.mode if gate else "none",
                             space=[param.model_dump(mode="json") for param in template.space.params.values()])
    return channel


def make_executor(config: SessionConfig, template: Template, stores: Stores,
                  notify: Callable[[str], None]) -> Executor:
    """Where stages run: this machine's sandbox, or (``--executor ray``) a Ray cluster."""
    pristine = template.path / "env"
    plan = (worker_plan(config, template, stores.workspace.path, stores.tracker.local_artifact_root())
            if config.workers == "warm" else None)
    runner = StageRunner(stores.workspace.path, stores.sandbox, stores.guard, pristine_env=pristine)
    evaluator = FrozenEvaluator(stores.workspace.path, stores.guard, stores.sandbox, pristine_env=pristine)
    if config.executor != "ray":
        return LocalStages(runner, evaluator, plan)
    return RayExecutor(runner, evaluator, ray_stages(config, template, stores, plan, notify), plan)


def ray_stages(config: SessionConfig, template: Template, stores: Stores, plan: WorkerPlan | None,
               notify: Callable[[str], None]) -> RayStages:
    """The Ray side of ``--executor ray``: what every stage's job needs, and the cluster."""
    task = remote_stage.session_task(stores.workspace.path, config.session_dir / "frozen_hashes.json", config.sandbox,
                                     stores.sandbox.limits, plan)
    return RayStages(config.ray_address, f"{config.name}-{stores.run_id[:8]}", task, config.session_dir,
                     tracking_uri=stores.tracker.uri, artifact_uri=stores.tracker.checkpoints.artifact_uri,
                     session_run_id=stores.run_id, cpus=trial_cpus(config, template) or 1.0,
                     want_gpu=config.gpus != "none", notify=notify)


def assemble(config: SessionConfig, template: Template, stores: Stores, budget: Budget, *,
             observer: Observer | None = None, gate: Gate | None = None, api_key: str | None = None,
             tree: Tree | None = None) -> Controller:
    """The controller and its collaborators, for a new session or a resumed one."""
    channel = open_channel(config, template, gate)
    observer = Observers(observer or Observer(), ChannelObserver(channel))
    gate = gate or Gate("none")
    gate.channel = channel
    proposer = make_proposer(config, template, stores.workspace, budget, api_key, notify=observer.message,
                             tracer=partial(stores.tracker.llm_span, stores.run_id, config.name))
    parts = Collaborators(
        tracker=stores.tracker,
        workspace=stores.workspace,
        files=stores.files,
        executor=make_executor(config, template, stores, notify=observer.message),
        proposer=proposer,
        policy=None if proposer.chooses_parent else tree_policy(config),
        report=partial(report_session, stores.tracker, config.name, config.session_dir),
        noise=budget.goals.noise,  # the one the goals, the verdicts and the LLM's prompt all count
    )
    return Controller(config, template, parts, stores.run_id, budget=budget, observer=observer, gate=gate,
                      tree=tree, lock=stores.lock)
