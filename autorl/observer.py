"""Hooks the controller calls as a session runs; the CLI's live view implements them.

The default does nothing, so the library runs headless and tests need no terminal.
"""

from __future__ import annotations

from autorl.tree import Node, Tree


class Observer:
    def session_started(self, name: str, tree: Tree) -> None: ...

    def message(self, text: str) -> None: ...

    def stage_started(self, node: Node, tree: Tree) -> None: ...

    def step(self, node: Node, record: dict) -> None: ...

    def stage_finished(self, node: Node, tree: Tree) -> None: ...

    def session_finished(self, tree: Tree, status: str, reason: str) -> None: ...
