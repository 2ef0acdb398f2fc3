"""Hooks the controller calls as a session runs; the live view and the TUI implement them.

The default does nothing, so the library runs headless and tests need no terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.proposers import Proposal
from search.tree import Node, Tree

if TYPE_CHECKING:
    from autorl.loop.budget import Budget


class Observer:
    def session_started(self, name: str, tree: Tree, budget: "Budget") -> None: ...

    def message(self, text: str) -> None: ...

    def proposal_pending(self, proposal: Proposal, parent: Node | None, key: str | None = None) -> None:
        """A proposal waits for a person's decision at the gate (``key`` names it there)."""

    def stage_started(self, node: Node, tree: Tree) -> None: ...

    def stage_phase(self, node: Node, phase: str) -> None:
        """The running stage moved on: starting, training, saving or evaluating."""

    def step(self, node: Node, record: dict) -> None: ...

    def stage_finished(self, node: Node, tree: Tree) -> None: ...

    def session_finished(self, tree: Tree, status: str, reason: str) -> None: ...


class Observers(Observer):
    """Several observers heard as one (the live view or TUI here, the channel for viewers elsewhere)."""

    def __init__(self, *observers: Observer):
        self.observers = observers

    def session_started(self, name: str, tree: Tree, budget) -> None:
        for observer in self.observers:
            observer.session_started(name, tree, budget)

    def message(self, text: str) -> None:
        for observer in self.observers:
            observer.message(text)

    def proposal_pending(self, proposal: Proposal, parent: Node | None, key: str | None = None) -> None:
        for observer in self.observers:
            observer.proposal_pending(proposal, parent, key)

    def stage_started(self, node: Node, tree: Tree) -> None:
        for observer in self.observers:
            observer.stage_started(node, tree)

    def stage_phase(self, node: Node, phase: str) -> None:
        for observer in self.observers:
            observer.stage_phase(node, phase)

    def step(self, node: Node, record: dict) -> None:
        for observer in self.observers:
            observer.step(node, record)

    def stage_finished(self, node: Node, tree: Tree) -> None:
        for observer in self.observers:
            observer.stage_finished(node, tree)

    def session_finished(self, tree: Tree, status: str, reason: str) -> None:
        for observer in self.observers:
            observer.session_finished(tree, status, reason)

    def find(self, kind: type) -> Observer | None:
        return next((o for o in self.observers if isinstance(o, kind)), None)
