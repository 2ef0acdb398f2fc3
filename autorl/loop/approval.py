"""A person in the loop: proposals wait for a decision before any compute is spent.

``--approve edits`` holds proposals that change ``train.py``, ``all`` holds every stage,
``none`` (the default) holds nothing. The controller asks its gate for a decision; the
TUI answers from another thread, or a TUI attached from another process answers through
the session's channel (``autorl/loop/channel.py``): the first decision for a proposal wins,
wherever it comes from. A rejection's reason goes back to the proposer as context for
its next proposal; an edit of the values is validated like any proposal.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Callable

from autorl.config import APPROVE_MODES
from autorl.loop.channel import POLL_S, Channel
from search.proposers import Proposal
from search.tree import Decision, Node


class Gate:
    """Decides whether a proposal waits, and hands the wait over to whoever answers."""

    def __init__(self, mode: str = "none", decided_by: str = "user", channel: Channel | None = None):
        if mode not in APPROVE_MODES:
            raise ValueError(f"unknown approve mode {mode!r}; choose one of {', '.join(APPROVE_MODES)}")
        self.mode = mode
        self.decided_by = decided_by
        self.channel = channel  # decisions from attached viewers, when the session has one
        self.pending_key: str | None = None
        self.decisions: queue.Queue[Decision] = queue.Queue()
        self.running = threading.Event()
        self.running.set()
        self.stop_requested = threading.Event()

    def needs_review(self, proposal: Proposal) -> bool:
        return self.mode == "all" or (self.mode == "edits" and proposal.train_py is not None)

    def key_for(self, base: str) -> str:
        """The key a proposal waits under: its content's, counted on past the decisions already
        acted on for the same content (a stage proposed again after a rejection is asked anew)."""
        return self.channel.next_key(base) if self.channel is not None else base

    def publish(self, key: str, proposal: Proposal, parent: Node | None, diff: str, proposer: str) -> None:
        """Show the proposal to attached viewers (a local TUI hears of it from the observer)."""
        self.pending_key = key
        if self.channel is not None:
            self.channel.set_pending(key, proposal, parent, diff, proposer)

    def review(self, proposal: Proposal, key: str | None = None,
               while_waiting: Callable[[], None] = lambda: None) -> Decision:
        """Block until a decision arrives (or approve at once when nothing needs review);
        ``while_waiting`` runs between polls (stages already running are recorded meanwhile)."""
        if not self.needs_review(proposal):
            return Decision(action="approve", decided_by="autorl (no review needed)")
        self.pending_key = key
        while True:
            while_waiting()
            if self.stop_requested.is_set():  # not a decision on the proposal: nothing is recorded for it
                return Decision(action="reject", reason="session stopped", decided_by=self.decided_by)
            if self.channel is not None and key is not None and \
                    (decision := self.channel.decision_for(key, set_aside=True)):
                return decision
            try:
                return self.decisions.get(timeout=POLL_S)
            except queue.Empty:
                continue

    def settle(self, key: str) -> None:
        """The decision on ``key`` was acted on: viewers stop showing it, and it is not used again."""
        if self.channel is not None:
            self.channel.consume(key)
            self.channel.clear_pending(key)
        self.pending_key = None

    def decide(self, decision: Decision, key: str | None) -> bool:
        """A decision from this process on the proposal ``key``; False when that proposal is no
        longer waiting (an attached viewer decided it first)."""
        if key is None or key != self.pending_key:
            return False
        decision = dataclasses.replace(decision, decided_by=self.decided_by)
        if self.channel is not None:
            return self.channel.post_decision(key, decision)
        self.decisions.put(decision)
        return True

    def wait_while_paused(self, while_waiting: Callable[[], None] = lambda: None) -> None:
        """Hold the next stage while this process or an attached viewer has paused the session
        (stages already running go on: ``while_waiting`` records them)."""
        while not self.stop_requested.is_set() and \
                (not self.running.is_set() or (self.channel is not None and self.channel.paused)):
            while_waiting()
            time.sleep(POLL_S)

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        """Resume, whoever paused (this process, or a viewer through the channel)."""
        self.running.set()
        if self.channel is not None:
            self.channel.set_paused(False)
