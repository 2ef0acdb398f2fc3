"""A person in the loop: proposals wait for a decision before any compute is spent.

``--approve edits`` holds proposals that change ``train.py``, ``all`` holds every stage,
``none`` (the default) holds nothing. The controller asks its gate for a decision; the
TUI answers from another thread. A rejection's reason goes back to the proposer as
context for its next proposal; an edit of the values is validated like any proposal.
"""

from __future__ import annotations

import dataclasses
import queue
import threading

from search.proposers import Proposal
from search.tree import Decision

APPROVE_MODES = ("none", "edits", "all")


class Gate:
    """Decides whether a proposal waits, and hands the wait over to whoever answers."""

    def __init__(self, mode: str = "none", decided_by: str = "user"):
        if mode not in APPROVE_MODES:
            raise ValueError(f"unknown approve mode {mode!r}; choose one of {', '.join(APPROVE_MODES)}")
        self.mode = mode
        self.decided_by = decided_by
        self.decisions: queue.Queue[Decision] = queue.Queue()
        self.running = threading.Event()
        self.running.set()
        self.stop_requested = threading.Event()

    def needs_review(self, proposal: Proposal) -> bool:
        return self.mode == "all" or (self.mode == "edits" and proposal.train_py is not None)

    def review(self, proposal: Proposal) -> Decision:
        """Block until a decision arrives (or approve at once when nothing needs review).
        Whoever answers learned of the proposal through ``Observer.proposal_pending``."""
        if not self.needs_review(proposal):
            return Decision(action="approve", decided_by="autorl (no review needed)")
        return self.decisions.get()

    def decide(self, decision: Decision) -> None:
        self.decisions.put(dataclasses.replace(decision, decided_by=self.decided_by))

    def wait_while_paused(self) -> None:
        self.running.wait()

    def pause(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()
