"""What a session has spent: stages, GRPO steps trained, and the share of its slot time
(wall time × ``--parallel``) that went to neither GRPO steps nor evaluation generation."""

from __future__ import annotations

from autorl.loop.budget import Budget
from autorl.stages.timing import productive_seconds
from autorl.storage.tracking import Tracker
from search.tree import Tree


class Ledger:
    def __init__(self, budget: Budget, tree: Tree, tracker: Tracker, session_run_id: str, slots: int):
        self.budget = budget
        self.tree = tree
        self.tracker = tracker
        self.session_run_id = session_run_id
        self.slots = slots
        self.productive = sum(productive_seconds(n.timing) for n in tree.nodes.values())  # a resume's past

    def add(self, seconds: float) -> None:
        self.productive += seconds

    def spending(self) -> dict[str, float]:
        trained = self.budget.settled_train_steps  # the budget's own count (a test checks it against the nodes)
        capacity = self.budget.elapsed * self.slots
        share = max(0.0, 1.0 - self.productive / capacity) if capacity > 0 else 0.0
        return {"stages_spent": self.budget.spent_stages, "train_steps_spent": trained,
                "productive_seconds": round(self.productive, 3), "overhead_share": round(share, 4)}

    def log(self, step: int = 0) -> None:
        """The spending so far as session-run metrics (at ``step``, the node count, while it runs)."""
        self.tracker.log_metrics(self.session_run_id, {"session_seconds": self.budget.elapsed, **self.spending()},
                                 step=step)
