"""Memory across sessions: what a new session reads of the earlier ones in its store.

Two sessions ran the same task when their template's frozen files and ``space.toml`` hash
the same (``template_fingerprint``); a session run carries its fingerprint as a tag, and
one written before the tag existed has it computed from the two files it logged when it
started. At its start a session (``--memory on``, the default) reads every earlier
session with its fingerprint, from any strategy, and keeps what it read as ``memory.json``
in its folder and in MLflow: the prompt section for the LLM, the stages that warm-start
TPE, the stages they repeated to measure seed noise (``repeats``: a file written before
they were kept has none), and which sessions they came from. A resume reads that file,
never the store again, so a session finished after this one started does not change what
this one knew.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autorl.storage.records import nodes_from_runs, session_tags_of
from autorl.storage.session_files import MEMORY as MEMORY_FILE
from autorl.storage.tracking import Tracker
from search.earlier import EarlierSession, memory_text, memory_trials
from search.seed_noise import repeats_in
from search.space import SearchSpace
from search.tree import Tree

FINGERPRINT_TAG = "autorl.template_fingerprint"

MEMORY_VERSION = 1


def template_fingerprint(frozen_hashes: dict[str, str], space_toml: str) -> str:
    """The same for two templates whose frozen files and search space are the same."""
    digest = hashlib.sha256(json.dumps(frozen_hashes, sort_keys=True).encode())
    digest.update(space_toml.encode())
    return digest.hexdigest()[:16]


@dataclass
class Memory:
    """What a session read of the earlier ones (``mode`` off: nothing, by request)."""

    mode: str = "off"
    sessions: list[dict] = field(default_factory=list)  # name, strategy, stages
    text: str = ""  # the LLM prompt's section
    trials: list[dict] = field(default_factory=list)  # TPE's warm start (search/earlier.py: memory_trials)
    repeats: list[dict] = field(default_factory=list)  # stages trained again with another seed (search/seed_noise.py)
    version: int = MEMORY_VERSION

    def summary(self) -> str:
        """One line for `show`, the report and the first screen."""
        if self.mode != "on":
            return "off (--memory off): no earlier session read"
        if not self.sessions:
            return "on: no earlier session on this template in this store"
        named = ", ".join(f"{s['name']} ({s['strategy']}, {s['stages']} stages)" for s in self.sessions)
        return (f"read {len(self.sessions)} earlier session{'s' * (len(self.sessions) > 1)} on this template: {named}; "
                f"{len(self.trials)} stages warm-start TPE")

    def prompt_text(self) -> str:
        """The LLM prompt's section, or why it is empty: a brief may promise memory."""
        if self.text.strip():
            return self.text
        if self.mode != "on":
            return "None shown: memory is off for this session (`--memory off`)."
        return "None: memory is on, and no earlier session on this template is in this store."

    def save(self, folder: Path) -> Path:
        path = folder / MEMORY_FILE
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def load(cls, folder: Path) -> "Memory":
        """The session's memory; a session made before memory existed read nothing."""
        path = folder / MEMORY_FILE
        if not path.is_file():
            return cls(mode="off")
        data = json.loads(path.read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def read_memory(tracker: Tracker, fingerprint: str, space: SearchSpace, exclude_run_id: str,
                seed: int | None = None) -> Memory:
    """What the earlier sessions with ``fingerprint`` measured, oldest first (``seed``: this
    session's, to name an earlier one that trained its stages with the same seeds)."""
    sessions = earlier_sessions(tracker, fingerprint, exclude_run_id)
    return Memory(mode="on", sessions=[{"name": s.name, "strategy": s.strategy, "stages": s.stages} for s in sessions],
                  text=memory_text(sessions, space, seed), trials=memory_trials(sessions, space),
                  repeats=[r.to_dict() for s in sessions for r in repeats_in(s.tree, s.name)])


def earlier_sessions(tracker: Tracker, fingerprint: str, exclude_run_id: str) -> list[EarlierSession]:
    found = []
    for run in reversed(tracker.sessions()):  # oldest first
        if run.info.run_id == exclude_run_id or fingerprint_of(tracker, run) != fingerprint:
            continue
        session = earlier_session(tracker, run)
        if session.stages:
            found.append(session)
    return found


def fingerprint_of(tracker: Tracker, run) -> str | None:
    """A session run's fingerprint: its tag, else from the files it logged at its start."""
    if tag := run.data.tags.get(FINGERPRINT_TAG):
        return tag
    with tempfile.TemporaryDirectory() as scratch:
        try:
            hashes = tracker.client.download_artifacts(run.info.run_id, "frozen_hashes.json", scratch)
            space = tracker.client.download_artifacts(run.info.run_id, "space.toml", scratch)
        except Exception:  # noqa: BLE001 - a session cut short before it logged them: not comparable
            return None
        return template_fingerprint(json.loads(Path(hashes).read_text()), Path(space).read_text())


def earlier_session(tracker: Tracker, run) -> EarlierSession:
    metrics, tags = run.data.metrics, session_tags_of(run)
    tree = Tree(base_score=metrics.get("base_score"), base_stderr=metrics.get("base_stderr"))
    for node in nodes_from_runs(tracker.node_runs(run.info.run_id)):
        tree.add(node)
    diffs = {}
    for node in tree.nodes.values():
        if node.edited and node.mlflow_run_id:
            diffs[node.id] = edit_diff(tracker, node.mlflow_run_id)
    return EarlierSession(name=tags.get("autorl.session", run.info.run_name or "?"),
                          strategy=tags.get("autorl.strategy", "?"), tree=tree,
                          test_score=metrics.get("best_test_score"), test_stderr=metrics.get("best_test_stderr"),
                          diffs=diffs, seed=seed_of(tags))


def seed_of(tags: dict) -> int | None:
    """The --seed a session ran with, from its stored config (None: unreadable)."""
    try:
        seed = json.loads(tags.get("autorl.config") or "{}").get("seed")
    except (json.JSONDecodeError, AttributeError):
        return None
    return seed if isinstance(seed, int) else None


def edit_diff(tracker: Tracker, run_id: str) -> str:
    with tempfile.TemporaryDirectory() as scratch:
        try:
            return Path(tracker.client.download_artifacts(run_id, "train_py.diff", scratch)).read_text()
        except Exception:  # noqa: BLE001 - a stage that failed before its diff was logged
            return ""
