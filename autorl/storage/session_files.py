"""The session folder is a cache: what it holds that a session needs is in MLflow too.

A resume, ``show`` or ``report`` on another machine, or after the folder was deleted,
rebuilds the folder from the session's run and its nodes' runs:

- ``session/workspace.bundle``: the workspace's git history (every train.py edit is a
  commit), one ``git bundle``, logged when the session starts and before a node that
  runs a new commit has a run;
- ``frozen_hashes.json``: the frozen files' hashes taken when the session started;
- ``session/optuna.journal``: the session's own Optuna journal (the default study
  storage), logged before each node's run is made and after each node is recorded, so
  every trial a node names is in it;
- ``session/llm_replies.jsonl``: the LLM replies already paid for;
- ``session/memory.json``: what the session read of the earlier sessions on its template
  when it started (autorl/storage/earlier_sessions.py), so a resume knows what it knew;
- ``base/``: the base model's evaluations; each node's small files (spec, metrics,
  evaluation, diagnosis, diff) from its own run. Checkpoints stay in the store until a
  stage needs one (autorl/storage/checkpoints.py).

The base model itself is not copied into MLflow: it comes from the template, found at
its recorded path or, for a built-in template, by name, and is checked against the
recorded hashes like every frozen file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from autorl.errors import SessionError
from autorl.stages.frozen import hash_tree
from autorl.stages.template import Template
from autorl.stages.workspace import Workspace
from autorl.storage.tracking import Tracker

MEMORY_TAG = "autorl.memory"  # one line: what the session read of earlier ones
NOISE_TAG = "autorl.seed_noise"  # one line: the seed-to-seed spread its verdicts count, and where it came from

FOLDER = "session"
BUNDLE = "workspace.bundle"
FROZEN_HASHES = "frozen_hashes.json"
STUDY_JOURNAL = "optuna.journal"
LLM_REPLIES = "llm_replies.jsonl"
MEMORY = "memory.json"
NODE_FILES = ("spec.json", "metrics.jsonl", "eval_validation.json", "diagnosis.json", "train_py.diff",
              "eval_test.json")
BASE_FILES = ("eval_validation.json", "eval_test.json")


class SessionFiles:
    """Keeps the session's own files in its MLflow run as they change."""

    def __init__(self, tracker: Tracker, run_id: str, session_dir: Path, journal: Path | None):
        self.tracker = tracker
        self.run_id = run_id
        self.session_dir = session_dir
        self.journal = journal  # the session's Optuna journal when it has its own (None: a database)

    def save_workspace(self, workspace: Path) -> None:
        """The workspace's whole git history, as one bundle."""
        with tempfile.TemporaryDirectory() as scratch:
            bundle = Path(scratch) / BUNDLE
            subprocess.run(["git", "bundle", "create", str(bundle), "--all"], cwd=workspace, check=True,
                           capture_output=True)
            self.tracker.log_artifacts(self.run_id, [bundle], FOLDER)

    def save_search_state(self) -> None:
        """The study journal and the LLM replies as they are now."""
        files = [self.session_dir / LLM_REPLIES] + ([self.journal] if self.journal else [])
        self.tracker.log_artifacts(self.run_id, files, FOLDER)

    def save_memory(self, memory) -> None:
        """What the session read of earlier sessions (``earlier_sessions.Memory``), and a tag saying so."""
        self.tracker.log_artifacts(self.run_id, [memory.save(self.session_dir)], FOLDER)
        self.tracker.set_tags(self.run_id, {MEMORY_TAG: memory.summary()})

    def save_base_evaluation(self) -> None:
        self.tracker.log_artifacts(self.run_id, [self.session_dir / "base" / name for name in BASE_FILES], "base")


def restore(tracker: Tracker, run, session_dir: Path, template: Template, journal: Path | None,
            node_runs: dict[str, str]) -> list[str]:
    """Put back into ``session_dir`` what it lacks, from MLflow; returns what was restored.
    ``node_runs`` maps each recorded node to its run."""
    restored = []
    run_id = run.info.run_id
    workspace = session_dir / "workspace"
    if not (workspace / ".git").is_dir():
        restore_workspace(tracker, run_id, workspace, template, may_remake=not node_runs)
        restored.append("workspace")
    if not (session_dir / FROZEN_HASHES).is_file():
        if not fetch(tracker, run_id, FROZEN_HASHES, session_dir / FROZEN_HASHES, required=bool(node_runs)):
            (session_dir / FROZEN_HASHES).write_text(json.dumps(hash_tree(workspace / "env"), indent=2))
            tracker.log_artifacts(run_id, [session_dir / FROZEN_HASHES])  # its creation stopped before it was
        restored.append("frozen hashes")
    if journal is not None and not journal.is_file() and fetch(tracker, run_id, f"{FOLDER}/{STUDY_JOURNAL}", journal):
        restored.append("Optuna study")
    if not (session_dir / LLM_REPLIES).is_file() and \
            fetch(tracker, run_id, f"{FOLDER}/{LLM_REPLIES}", session_dir / LLM_REPLIES):
        restored.append("LLM replies")
    if not (session_dir / MEMORY).is_file() and fetch(tracker, run_id, f"{FOLDER}/{MEMORY}", session_dir / MEMORY):
        restored.append("memory")
    for name in BASE_FILES:
        if not (session_dir / "base" / name).is_file():
            fetch(tracker, run_id, f"base/{name}", session_dir / "base" / name)
    fetched_nodes = 0
    for node_id, node_run_id in node_runs.items():
        folder = session_dir / "nodes" / node_id
        if folder.is_dir():
            continue
        for name in NODE_FILES:
            fetch(tracker, node_run_id, name, folder / name)
        folder.mkdir(parents=True, exist_ok=True)
        fetched_nodes += 1
    if fetched_nodes:
        restored.append(f"{fetched_nodes} nodes' records")
    check_frozen(workspace, session_dir / FROZEN_HASHES)
    return restored


def restore_workspace(tracker: Tracker, run_id: str, workspace: Path, template: Template, may_remake: bool) -> None:
    """Clone the workspace from its bundle, and put the template's base model in it. A
    session stopped while it was being created, before any node named a commit, gets a
    new copy of its template (``may_remake``): that is where it starts either way."""
    with tempfile.TemporaryDirectory() as scratch:
        bundle = Path(scratch) / BUNDLE
        if not fetch(tracker, run_id, f"{FOLDER}/{BUNDLE}", bundle):
            if may_remake:
                shutil.rmtree(workspace, ignore_errors=True)
                Workspace.create(template, workspace)
                return
            raise SessionError("the session's workspace is not in MLflow (it was made by an autorl that kept it only "
                               "in the session folder); resume it where its folder is")
        shutil.rmtree(workspace, ignore_errors=True)
        workspace.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--quiet", "--branch", "main", str(bundle), str(workspace)], check=True,
                       capture_output=True)
    subprocess.run(["git", "remote", "remove", "origin"], cwd=workspace, check=True, capture_output=True)
    for key, value in (("user.name", "autorl"), ("user.email", "autorl@localhost")):
        subprocess.run(["git", "config", key, value], cwd=workspace, check=True, capture_output=True)
    base_model = template.base_model_dir()
    shutil.copytree(base_model, template.base_model_dir(workspace), dirs_exist_ok=True)


def check_frozen(workspace: Path, hashes_file: Path) -> None:
    """The rebuilt workspace's frozen files must be the ones the session started with."""
    expected = json.loads(hashes_file.read_text())
    found = hash_tree(workspace / "env")
    changed = sorted(path for path in expected.keys() | found.keys() if expected.get(path) != found.get(path))
    if changed:
        raise SessionError(f"the template found here differs from the one the session started with in "
                           f"{', '.join(changed[:5])}{' …' if len(changed) > 5 else ''}; resume with the same template")


def fetch(tracker: Tracker, run_id: str, artifact: str, destination: Path, required: bool = False) -> bool:
    """Download one artifact file to ``destination``; False when the run has none."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination.parent) as scratch:
        try:
            local = tracker.client.download_artifacts(run_id, artifact, scratch)
        except Exception as exc:  # noqa: BLE001 - each store says "not there" its own way
            if required:
                raise SessionError(f"{artifact} of run {run_id} cannot be read from MLflow: {exc}") from exc
            return False
        Path(local).replace(destination)
    return True
