"""A proposal's review before it runs: shown to a person (``--approve``), approved,
rejected or edited, and the decision kept.

The gate (``autorl/loop/approval.py``) waits for a decision; this object acts on it: a
rejection reaches the proposer and MLflow, an edit replaces the proposer's values
(validated again here: an attached viewer is not trusted), and every decision is
appended to ``decisions.jsonl``, an artifact of the session run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autorl.loop.approval import Gate
from autorl.loop.channel import proposal_key
from autorl.loop.collaborators import Collaborators
from autorl.loop.observer import Observer
from search.errors import ProposalError
from search.proposers import Proposal
from search.space import SearchSpace
from search.tree import Decision, Node, Tree


@dataclass
class Reviewed:
    """A proposal cleared to run, with the decision on it (None when none was asked for)."""

    proposal: Proposal
    decision: Decision | None
    key: str


class Review:
    def __init__(self, gate: Gate, parts: Collaborators, space: SearchSpace, session_run_id: str, session_dir: Path,
                 observer: Observer):
        self.gate = gate
        self.parts = parts
        self.space = space
        self.workspace = parts.workspace
        self.tracker = parts.tracker
        self.session_run_id = session_run_id
        self.session_dir = session_dir
        self.observer = observer
        self.rejected = 0

    def consider(self, proposal: Proposal, tree: Tree, while_waiting: Callable[[], None],
                 check_stop: Callable[[], None]) -> Reviewed | None:
        """The proposal as it may run (edited or not), or None when it was rejected."""
        parent = tree.nodes.get(proposal.parent) if proposal.parent else None
        key = self.gate.key_for(proposal_key(proposal, len(tree.nodes)))
        needs_review = self.gate.needs_review(proposal)
        if needs_review:
            self.gate.publish(key, proposal, parent, self.diff(proposal, parent), self.parts.proposer.name)
            self.observer.proposal_pending(proposal, parent, key)
        decision = self.gate.review(proposal, key, while_waiting=while_waiting)
        check_stop()
        if decision.action == "edit":
            try:
                proposal = self.apply_edit(proposal, decision)
            except ProposalError as exc:
                decision = Decision("reject", f"edited values invalid: {exc}", None, decision.decided_by)
        if decision.action == "reject":
            self.reject(proposal, decision)
            self.gate.settle(key)
            return None
        return Reviewed(proposal, decision if needs_review else None, key)

    def accepted(self, node: Node, reviewed: Reviewed) -> None:
        """The proposal became ``node``: its decision is kept, and viewers stop showing it."""
        if node.decision is not None:
            self.log_decision(node, reviewed.proposal, node.decision)
        self.gate.settle(reviewed.key)

    def diff(self, proposal: Proposal, parent: Node | None) -> str:
        return self.workspace.diff_text(parent.commit if parent else None, proposal.train_py)

    def reject(self, proposal: Proposal, decision: Decision) -> None:
        """A person said no: nothing runs, the proposer hears why, MLflow keeps the decision."""
        self.rejected += 1
        reason = decision.reason or "no reason given"
        self.parts.proposer.withdraw(proposal, reason=reason)
        self.log_decision(None, proposal, decision)
        self.observer.message(f"proposal rejected by {decision.decided_by}: {reason}")

    def apply_edit(self, proposal: Proposal, decision: Decision) -> Proposal:
        """The person's values replace the proposer's (checked against the space again)."""
        values = self.space.check(decision.hyperparameters or {})
        self.parts.proposer.withdraw(proposal)  # the values it proposed do not run
        return proposal.model_copy(update={
            "hyperparameters": values, "optuna_trial": None,
            "rationale": f"{proposal.rationale} (values edited by {decision.decided_by})"})

    def log_decision(self, node: Node | None, proposal: Proposal, decision: Decision) -> None:
        entry = {"node": node.id if node else None, "parent": proposal.parent, **decision.to_dict(),
                 "proposed": proposal.hyperparameters}
        with (self.session_dir / "decisions.jsonl").open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        self.tracker.log_artifacts(self.session_run_id, [self.session_dir / "decisions.jsonl"])
        self.tracker.log_metrics(self.session_run_id, {"rejected_proposals": self.rejected}, step=self.rejected)
