"""A session's channel in its folder: how a TUI attached from another process watches
the session and decides its pending proposals.

The controller's process writes, under ``<session>/channel/``:

- ``events.jsonl``: what its observer hears (steps, phases, notes, proposals, the end),
  one JSON object per line, appended; a viewer replays it from the start and tails it;
- ``tree.json``: the latest tree (replaced atomically when it changes, so the events
  file stays small in long sessions);
- ``session.json``: name, strategy, approval mode and the search space, for a viewer
  that validates an edit before sending it;
- ``pending.json``: the proposal waiting for a decision, with its key.

Viewers write ``decisions/<key>.json``, created exclusively (a hard link): the first
decision for a proposal wins and every later one is refused, across any number of
viewers. A key names a proposal by the tree it was made for and its content (plus how
many decisions on that same content were already acted on), so a controller that is
restarted and proposes the same stage again finds a decision sent while it was away.
The controller moves a decision it acted on to ``decided/`` (and one it cannot read to
``unreadable/``); a decision for a key already acted on is refused. ``paused`` (a file)
holds the next stage while it exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from autorl.loop.observer import Observer
from search.proposers import Proposal
from search.tree import Decision, Node, Tree

POLL_S = 0.2


def proposal_key(proposal: Proposal, tree_size: int) -> str:
    """A stable name for a proposal: the same stage proposed for the same tree has the same key."""
    content = json.dumps({"n": tree_size, "parent": proposal.parent, "values": proposal.hyperparameters,
                          "train_py": proposal.train_py}, sort_keys=True, default=str)
    return f"p{tree_size + 1:03d}-{hashlib.sha256(content.encode()).hexdigest()[:10]}"


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


class Channel:
    def __init__(self, session_dir: Path):
        self.folder = session_dir / "channel"
        self.events = self.folder / "events.jsonl"
        self.tree_file = self.folder / "tree.json"
        self.session_file = self.folder / "session.json"
        self.pending_file = self.folder / "pending.json"
        self.decisions = self.folder / "decisions"
        self.decided = self.folder / "decided"
        self.unreadable = self.folder / "unreadable"
        self.paused_flag = self.folder / "paused"

    @classmethod
    def open(cls, session_dir: Path) -> "Channel":
        """The channel of a session this process runs (its folders made)."""
        channel = cls(session_dir)
        channel.decisions.mkdir(parents=True, exist_ok=True)
        channel.decided.mkdir(exist_ok=True)
        channel.unreadable.mkdir(exist_ok=True)
        return channel

    @property
    def exists(self) -> bool:
        return self.events.exists()

    # -- written by the controller's process ------------------------------------------------

    def publish(self, kind: str, **payload: Any) -> None:
        line = json.dumps({"kind": kind, "time": time.time(), **payload}, default=str)
        with self.events.open("a") as handle:
            handle.write(line + "\n")

    def describe_session(self, **info: Any) -> None:
        write_atomically(self.session_file, json.dumps(info, default=str))

    def save_tree(self, tree: Tree) -> None:
        data = {"base_score": tree.base_score, "base_stderr": tree.base_stderr,
                "nodes": [node.to_dict() for node in tree.nodes.values()]}
        write_atomically(self.tree_file, json.dumps(data, default=str))

    def set_pending(self, key: str, proposal: Proposal, parent: Node | None, diff: str, proposer: str) -> None:
        payload = {"key": key, "proposal": proposal.model_dump(mode="json", exclude={"transcript"}),
                   "parent": parent.to_dict() if parent else None, "diff": diff, "proposer": proposer}
        write_atomically(self.pending_file, json.dumps(payload, default=str))
        self.publish("proposal_pending", key=key)

    def clear_pending(self, key: str) -> None:
        pending = self.pending()
        if pending and pending["key"] == key:
            self.pending_file.unlink(missing_ok=True)

    def next_key(self, base: str) -> str:
        """``base`` numbered past the decisions already acted on for it."""
        return f"{base}.{sum(1 for _ in self.decided.glob(f'{base}.*'))}"

    def acted_on(self, key: str) -> bool:
        return any(self.decided.glob(f"{key}-*.json"))

    def decision_for(self, key: str, set_aside: bool = False) -> Decision | None:
        """The decision sent for ``key``, if any. One that cannot be read is None; the
        controller (``set_aside``) moves it out of the way and says so, so a viewer can
        decide again — viewers only read."""
        path = self.decisions / f"{key}.json"
        try:
            decision = Decision(**json.loads(path.read_text()))
            if decision.action not in ("approve", "reject", "edit"):
                raise ValueError(f"unknown action {decision.action!r}")
            if not isinstance(decision.hyperparameters, (dict, type(None))) or not isinstance(decision.reason, str):
                raise ValueError("hyperparameters must be an object and reason a string")
            if decision.action == "edit" and not decision.hyperparameters:
                raise ValueError("an edit without values")
            return decision
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            if set_aside:
                try:
                    os.replace(path, self.unreadable / f"{key}-{time.time_ns()}.json")
                except FileNotFoundError:
                    return None
                self.publish("note", text=f"a decision on {key} could not be read ({exc}); decide again")
            return None

    def consume(self, key: str) -> None:
        """The controller acted on the decision for ``key``: it is kept, out of the way."""
        source = self.decisions / f"{key}.json"
        if source.exists():
            os.replace(source, self.decided / f"{key}-{time.time_ns()}.json")

    # -- written by viewers ---------------------------------------------------------------

    def post_decision(self, key: str, decision: Decision) -> bool:
        """Send a decision; False when another one for ``key`` got there first."""
        if (self.decisions / f"{key}.json").exists() or self.acted_on(key):
            return False
        temporary = self.decisions / f".{key}.{os.getpid()}.{time.time_ns()}.tmp"
        temporary.write_text(json.dumps(decision.to_dict()))
        try:
            os.link(temporary, self.decisions / f"{key}.json")  # atomic and exclusive: the first link wins
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)
        return True

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.paused_flag.touch()
        else:
            self.paused_flag.unlink(missing_ok=True)

    @property
    def paused(self) -> bool:
        return self.paused_flag.exists()

    # -- read by viewers ------------------------------------------------------------------

    def pending(self) -> dict | None:
        try:
            return json.loads(self.pending_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def tree(self) -> Tree:
        tree = Tree()
        try:
            data = json.loads(self.tree_file.read_text())
        except (OSError, json.JSONDecodeError):
            return tree
        tree.base_score, tree.base_stderr = data["base_score"], data["base_stderr"]
        for node in data["nodes"]:
            tree.add(Node.from_dict(node))
        return tree

    def session_info(self) -> dict:
        try:
            return json.loads(self.session_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def follow(self, stop, offset: int = 0) -> Iterator[dict]:
        """Events from ``offset`` on, waiting for new ones until ``stop()`` is true."""
        partial = b""
        while not stop():
            try:
                with self.events.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
            except FileNotFoundError:
                chunk = b""
            offset += len(chunk)
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()  # an incomplete last line waits for the rest
            for line in lines:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue
            if not chunk:
                time.sleep(POLL_S)


class ChannelObserver(Observer):
    """The controller's hooks, written to the channel for attached viewers."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.tree: Tree | None = None
        self.budget = None
        self.base_published = False

    def session_started(self, name: str, tree: Tree, budget) -> None:
        self.tree, self.budget = tree, budget
        self.channel.save_tree(tree)
        self.channel.publish("session_started", name=name, budget=budget.describe())

    def message(self, text: str) -> None:
        self.channel.publish("note", text=text)
        if not self.base_published and self.tree is not None and self.tree.base_score is not None:
            self.base_published = True  # the base model was just scored (or read back on resume)
            self.channel.save_tree(self.tree)
            self.channel.publish("tree", budget=self.budget.describe())

    def stage_started(self, node: Node, tree: Tree) -> None:
        self.tree_changed(node, tree)

    def tree_changed(self, node: Node, tree: Tree) -> None:
        self.channel.save_tree(tree)
        self.channel.publish("tree", node=node.id, budget=self.budget.describe() if self.budget else "")

    def stage_phase(self, node: Node, phase: str) -> None:
        self.channel.publish("phase", node=node.id, phase=phase)

    def step(self, node: Node, record: dict) -> None:
        self.channel.publish("step", node=node.id, record=record)

    def stage_finished(self, node: Node, tree: Tree) -> None:
        self.tree_changed(node, tree)

    def session_finished(self, tree: Tree, status: str, reason: str) -> None:
        self.channel.save_tree(tree)
        self.channel.publish("session_finished", status=status, reason=reason)
