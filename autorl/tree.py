"""The search tree: nodes are training stages, a root-to-leaf path is a schedule.

A node's parent is another node (its checkpoint is the starting point) or ``None``
for the base model. The tree is rebuilt from MLflow on demand, so it is a plain
in-memory journal with no storage of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass
class Node:
    id: str
    parent: str | None
    depth: int
    hyperparameters: dict[str, Any]
    seed: int
    proposer: str
    commit: str = ""
    status: Status = Status.PENDING
    reason: str = ""
    val_score: float | None = None
    val_stderr: float | None = None
    test_score: float | None = None
    test_stderr: float | None = None
    train_reward: float | None = None
    steps: int = 0
    step_offset: int = 0
    seconds: float = 0.0
    mlflow_run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        return self.status == Status.SUCCEEDED and self.val_score is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data


class Tree:
    """Nodes in creation order, plus the base model's score."""

    def __init__(self, base_score: float | None = None, base_stderr: float | None = None):
        self.nodes: dict[str, Node] = {}
        self.base_score = base_score
        self.base_stderr = base_stderr

    def add(self, node: Node) -> Node:
        if node.id in self.nodes:
            raise ValueError(f"duplicate node id {node.id}")
        if node.parent is not None and node.parent not in self.nodes:
            raise ValueError(f"node {node.id}: unknown parent {node.parent}")
        self.nodes[node.id] = node
        return node

    def next_id(self) -> str:
        return f"n{len(self.nodes) + 1:03d}"

    def children(self, node_id: str | None) -> list[Node]:
        return [n for n in self.nodes.values() if n.parent == node_id]

    def path(self, node_id: str) -> list[Node]:
        """Nodes from the first stage to ``node_id``: the schedule that produced it."""
        path = []
        current: str | None = node_id
        while current is not None:
            node = self.nodes[current]
            path.append(node)
            current = node.parent
        return path[::-1]

    def score_of(self, node_id: str | None) -> float | None:
        return self.base_score if node_id is None else self.nodes[node_id].val_score

    def stderr_of(self, node_id: str | None) -> float | None:
        return self.base_stderr if node_id is None else self.nodes[node_id].val_stderr

    def scored(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.scored]

    def best(self) -> Node | None:
        """The highest-scoring node; ties go to the earlier (cheaper) one."""
        scored = self.scored()
        return max(scored, key=lambda n: (n.val_score, -list(self.nodes).index(n.id))) if scored else None
