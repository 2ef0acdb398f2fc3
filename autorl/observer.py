"""Hooks the controller calls as a session runs; the live view and the TUI implement them.

The default does nothing, so the library runs headless and tests need no terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.proposers import Proposal
from search.tree import Node, Tree

if TYPE_CHECKING:
    from autorl.budget import Budget


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
