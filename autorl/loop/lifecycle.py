"""A node from proposal to record: its MLflow run, its train.py commit and spec, every
status it passes through, its score, diagnosis and what is logged of it.

Statuses change in one place (``transition``, and ``open_run`` for a run that starts),
and what MLflow holds of a node is always written through the node codec
(``records.node_tags``), so a resumed session reads back exactly what was written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from autorl import faults
from autorl.analysis.advice import fit_to_space
from autorl.analysis.curves import read_records
from autorl.analysis.diagnose import RewardScale, diagnose
from autorl.analysis.drift import weight_drift
from autorl.analysis.noise import paired_comparison
from autorl.analysis.plots import plot_curves
from autorl.config import SessionConfig
from autorl.errors import CheckpointError, ContractError, FrozenFileError
from autorl.loop.budget import Budget
from autorl.loop.collaborators import Collaborators
from autorl.loop.deferred import Deferred
from autorl.loop.noise_probe import is_repeat
from autorl.loop.observer import Observer
from autorl.stages.evaluate import EvalResult
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageWork
from autorl.stages.template import Template
from autorl.stages.timing import utc_now
from autorl.storage import records
from search.proposers import Proposal
from search.tree import Decision, Node, Status, Tree

STORED, DELETED = "stored", "deleted"  # where a node's checkpoint is (Node.checkpoint)
STAGE_ARTIFACTS = ("spec.json", "metrics.jsonl", "stdout.log", "stderr.log", "train_py.diff", "eval_validation.json",
                   "eval_validation_stderr.log", "diagnosis.json")


class StageLifecycle:
    def __init__(self, config: SessionConfig, template: Template, tree: Tree, parts: Collaborators,
                 session_run_id: str, budget: Budget, observer: Observer, deferred: Deferred):
        self.config = config
        self.template = template
        self.tree = tree
        self.parts = parts
        self.tracker = parts.tracker
        self.workspace = parts.workspace
        self.session_run_id = session_run_id
        self.budget = budget
        self.observer = observer
        self.deferred = deferred
        self.reward_scale = RewardScale(declared=template.reward_width)
        for node in tree.nodes.values():  # a resumed session knows the rewards it has seen
            self.reward_scale.learn(read_records(self.node_dir(node.id) / "metrics.jsonl"))

    def node_dir(self, node_id: str | None) -> Path:
        """A node's folder; the base model's (``None``) is ``base/``."""
        return self.config.session_dir / ("base" if node_id is None else f"nodes/{node_id}")

    def checkpoint(self, node_id: str | None) -> Path:
        """Where a stage that starts from ``node_id`` (None: the base model) reads its weights:
        the node's run's artifact store, fetched into the session folder when it is remote.
        A node recorded before checkpoints were artifacts has it in the session folder."""
        if node_id is None:
            return self.template.base_model_dir(self.workspace.path)
        node, cache = self.tree.nodes[node_id], self.node_dir(node_id) / "checkpoint"
        if node.checkpoint == DELETED:
            raise CheckpointError(f"{node_id}'s checkpoint was deleted by retention (--keep-checkpoints)")
        if node.checkpoint != STORED:
            return cache
        return self.tracker.checkpoints.fetch(node.mlflow_run_id, cache)

    def checkpoint_address(self, node_id: str | None) -> str | Path:
        """Where a stage elsewhere fetches its start: the artifact store's URI of a stored
        checkpoint; else (the base model, a checkpoint of an older record) a local folder."""
        node = self.tree.nodes[node_id] if node_id is not None else None
        if node is not None and node.checkpoint == STORED:
            return self.tracker.checkpoints.uri(node.mlflow_run_id)
        return self.checkpoint(node_id)

    # -- from proposal to a running stage -------------------------------------------------------

    def create(self, proposal: Proposal, decision: Decision | None) -> Node:
        """The node a proposal becomes, with its train.py commit and its MLflow run."""
        parent = self.tree.nodes.get(proposal.parent) if proposal.parent else None
        node_id = self.tree.next_id()
        values = self.template.space.check(proposal.hyperparameters)
        original = self.tree.nodes.get(proposal.repeat_of) if proposal.repeat_of else None
        node = Node(
            id=node_id,
            parent=proposal.parent,
            depth=1 if parent is None else parent.depth + 1,
            hyperparameters=values,
            seed=self.config.seed * 1000 + len(self.tree.nodes) + 1,
            proposer=self.parts.proposer.name,
            commit=self.commit_for(parent, proposal, node_id),
            step_offset=0 if parent is None else parent.path_steps,
            rationale=proposal.rationale,
            expected_effect=proposal.expected_effect,
            edited=proposal.train_py is not None,
            optuna_trial=proposal.optuna_trial,
            decision=decision,
            repeat_of=original.id if is_repeat(proposal, original, values) else None,
        )
        faults.point("node_committed")
        if node.edited:
            self.parts.files.save_workspace(self.workspace.path)  # its commit is in MLflow before its run is
        self.parts.files.save_search_state()  # so is the trial it names
        self.tree.add(node)
        self.open_run(node)
        faults.point("node_recorded")
        if proposal.transcript:
            self.tracker.log_text(node.mlflow_run_id, records.dumps(proposal.transcript), "llm_transcript.json")
        self.log_usage()
        return node

    def commit_for(self, parent: Node | None, proposal: Proposal, node_id: str) -> str:
        """The train.py commit a node runs: its parent's, plus one new commit for an edit."""
        base_commit = parent.commit if parent else self.workspace.root_commit
        if proposal.train_py is None:
            return base_commit
        summary = (proposal.rationale or "edit").splitlines()[0][:72]
        return self.workspace.commit_train_script(proposal.train_py, f"{node_id}: {summary}")

    def open_run(self, node: Node) -> None:
        """The node starts running, under a new MLflow run (one per attempt)."""
        node.status, node.reason = Status.RUNNING, ""
        node.mlflow_run_id = self.tracker.start_node(self.session_run_id, self.config.name, node.id, node.attempt,
                                                     records.node_tags(node), node.hyperparameters,
                                                     run_name=self.run_name(node))

    def run_name(self, node: Node) -> str:
        """The node's MLflow run name: its path from the base model (``base › n001 › n004``)."""
        return " › ".join(["base", *(n.id for n in self.tree.path(node.id))])

    def log_usage(self) -> None:
        """The proposer's counters (LLM tokens, cost, dropped proposals) on the session run."""
        if usage := self.parts.proposer.usage():
            self.tracker.log_metrics(self.session_run_id, usage, step=len(self.tree.nodes))

    def spec(self, node: Node, fetched_elsewhere: bool = False) -> TrialSpec:
        """What train.py is told: where to start and write, the values, its steps, seed and time.
        ``fetched_elsewhere``: the stage runs where it fetches its parent's checkpoint itself (a
        Ray job), so the start is the checkpoint's address in the artifact store."""
        node_dir = self.node_dir(node.id)
        start = self.checkpoint_address(node.parent) if fetched_elsewhere else self.checkpoint(node.parent)
        spec = TrialSpec(
            node_id=node.id,
            init_checkpoint=str(start),
            output_dir=str(node_dir),
            metrics_path=str(node_dir / "metrics.jsonl"),
            hyperparameters=node.hyperparameters,
            max_steps=self.template.stage_steps(node.hyperparameters),
            seed=node.seed,
            wall_seconds=self.budget.stage_wall_seconds(self.template.stage_wall_seconds),
        )
        node.planned_steps = spec.max_steps
        return spec

    # -- statuses ------------------------------------------------------------------------------

    def transition(self, node: Node, status: Status, reason: str = "") -> None:
        """Move a node to a new status. A failure is said; an interruption is written (through
        the codec) and its run ended now, since no ``record`` follows it."""
        node.status, node.reason = status, reason
        if status == Status.FAILED:
            self.observer.message(f"{node.id} failed: {reason}")
        if status == Status.INTERRUPTED:
            self.tracker.set_tags(node.mlflow_run_id, records.node_tags(node))
            self.tracker.end_node(node.mlflow_run_id, failed=True, killed=True)

    def retry(self, node: Node) -> None:
        """Train an interrupted node again, under a new MLflow run (the budget is not charged again)."""
        if node.status == Status.RUNNING:
            self.transition(node, Status.INTERRUPTED, "controller stopped mid-stage; re-run")
        node.attempt += 1
        self.open_run(node)

    def give_up(self, node: Node, reason: str) -> None:
        """Fail a node that will not be trained again: what it reserved is released (it trained
        nothing that counts), and its record is written."""
        self.budget.settle(node.id, 0)
        self.transition(node, Status.FAILED, reason)
        self.record(node, StageOutcome(None, reason=reason))

    # -- a stage that ended ---------------------------------------------------------------------

    def conclude(self, node: Node, work: StageWork) -> bool:
        """Record a stage that ended: its outcome, score, diagnosis and what the proposer
        learns. True when the failure broke the template contract."""
        outcome = work.outcome
        self.trained(node, outcome)
        node.timing = {**outcome.timing, "started_at": node.timing.get("started_at", utc_now())}
        breach = self.scored(node, work) if outcome.ok else outcome.breach
        if not outcome.ok:
            self.transition(node, Status.FAILED, outcome.reason)
        node.timing["ended_at"] = utc_now()
        faults.point("evaluated")
        self.diagnose(node, outcome)
        self.parts.proposer.observe(self.tree, node)
        self.record(node, outcome)
        return breach

    def trained(self, node: Node, outcome: StageOutcome) -> None:
        """What the stage's run says: its time, worker, memory, steps (settled with the budget)
        and last training reward."""
        result = outcome.result
        node.seconds = result.wall_seconds if result else 0.0
        node.worker = result.worker if result else ""
        peak = result.peak_memory_bytes if result else None
        node.peak_memory_mb = round(peak / 2**20, 1) if peak else None
        for note in result.notes if result else []:
            self.observer.message(f"{node.id}: {note}")
        node.steps = max((int(r.get("step", 0)) for r in outcome.records), default=0)
        self.budget.settle(node.id, node.steps)
        rewards = [r["reward"] for r in outcome.records if isinstance(r.get("reward"), (int, float))]
        node.train_reward = rewards[-1] if rewards else None

    def scored(self, node: Node, work: StageWork) -> bool:
        """A trained node's validation score; True when the evaluator broke its contract."""
        if work.refusal is not None:
            node.frozen_violation = isinstance(work.refusal, FrozenFileError)
            self.transition(node, Status.FAILED, str(work.refusal))
            return isinstance(work.refusal, ContractError) and not node.frozen_violation
        result = work.evaluation
        node.val_score, node.val_stderr, node.eval_engine = result.mean, result.stderr, result.engine
        node.eval_metrics = result.extra
        node.timing.update(eval_timing(result))
        self.transition(node, Status.SUCCEEDED)
        return False

    def diagnose(self, node: Node, outcome: StageOutcome) -> None:
        """Name what went wrong (or right) in this stage, against its parent on the same items."""
        node.comparison = paired_comparison(self.eval_items(node.id), self.eval_items(node.parent),
                                            stage_sd=self.parts.noise.sd(self.tree) or 0.0) if node.scored else None
        node.weight_drift = self.drift(node)
        self.reward_scale.learn(outcome.records)
        node.diagnosis = fit_to_space(diagnose(outcome.records, node.comparison, self.reward_scale),
                                      self.template.space, node.hyperparameters, self.template.eval_token_cap)
        node_dir = self.node_dir(node.id)
        (node_dir / "diagnosis.json").write_text(json.dumps(
            {"findings": [f.to_dict() for f in node.diagnosis],
             "comparison": node.comparison.to_dict() if node.comparison else None}, indent=2))
        run_id = node.mlflow_run_id
        self.deferred.submit(f"{node.id}: curves plot", plot_curves, outcome.records, node_dir / "curves.png",
                             f"{node.id} ← {node.parent or 'base'}",
                             then=lambda path: path and self.tracker.log_artifacts(run_id, [path]))

    def drift(self, node: Node) -> float | None:
        """How far the stage moved the weights from its start (relative L2), when both checkpoints
        are on this machine: a parent's checkpoint is never downloaded for it."""
        end, start = self.node_dir(node.id) / "checkpoint", self.start_at_hand(node.parent)
        if not node.scored or start is None or not end.is_dir():
            return None
        try:
            found = weight_drift(start, end)
        except Exception as exc:  # noqa: BLE001 - a checkpoint the loader refuses costs this number, not the stage
            self.observer.message(f"{node.id}: weight drift not measured ({exc})")
            return None
        return round(found.relative, 6) if found else None

    def start_at_hand(self, node_id: str | None) -> Path | None:
        """The checkpoint a child of ``node_id`` started from, if it is a folder here."""
        if node_id is None:
            return self.template.base_model_dir(self.workspace.path)
        node, cache = self.tree.nodes[node_id], self.node_dir(node_id) / "checkpoint"
        if node.checkpoint == STORED:
            return self.tracker.checkpoints.at_hand(node.mlflow_run_id, cache)
        return cache if node.checkpoint != DELETED and cache.is_dir() else None

    def eval_items(self, node_id: str | None) -> list[dict]:
        return validation_items(self.node_dir(node_id))

    def record(self, node: Node, outcome: StageOutcome) -> None:
        """Everything of the stage into its MLflow run, which then ends."""
        run_id, node_dir = node.mlflow_run_id, self.node_dir(node.id)
        self.tracker.log_step_records(run_id, outcome.records, offset=node.step_offset)
        self.tracker.log_metrics(run_id, records.node_metrics(node))
        (node_dir / "train_py.diff").write_text(self.workspace.diff_from_template(node.commit))
        self.tracker.log_artifacts(run_id, [node_dir / name for name in STAGE_ARTIFACTS])
        self.keep_checkpoint(node, outcome)
        self.tracker.set_tags(run_id, records.node_tags(node))
        self.tracker.end_node(run_id, failed=node.status == Status.FAILED)
        self.parts.files.save_search_state()

    def delete_checkpoint(self, node: Node) -> None:
        """Delete a node's checkpoint (retention), recording it first: a kill in between leaves
        a checkpoint no record points at, never a record pointing at nothing."""
        if node.checkpoint != DELETED:
            node.checkpoint = DELETED
            self.tracker.set_tags(node.mlflow_run_id, records.node_tags(node))
        self.tracker.checkpoints.delete(node.mlflow_run_id, self.node_dir(node.id) / "checkpoint")

    def keep_checkpoint(self, node: Node, outcome: StageOutcome) -> None:
        """A scored stage's checkpoint goes to its run's artifacts before its record says so
        (a Ray job put it there itself); a failed stage's is dropped: no stage can start from it."""
        folder = self.node_dir(node.id) / "checkpoint"
        if node.scored and outcome.checkpoint_stored:
            node.checkpoint = STORED
        elif node.scored and (folder / "config.json").is_file():
            self.tracker.checkpoints.save(node.mlflow_run_id, folder)
            node.checkpoint = STORED
        else:
            shutil.rmtree(folder, ignore_errors=True)
            if outcome.checkpoint_stored:
                self.tracker.checkpoints.delete(node.mlflow_run_id, folder)


def eval_timing(result: EvalResult) -> dict[str, float]:
    """``eval_s`` the evaluator's process launch to exit, ``eval_generation_s`` its decoding
    (or, when it does not say, its own in-process time)."""
    generation = result.generation_seconds if result.generation_seconds is not None else result.seconds
    return {"eval_s": round(result.wall_seconds, 3), "eval_generation_s": round(float(generation), 3)}


def validation_items(node_dir: Path) -> list[dict]:
    """A node's per-item validation results (empty while it has none)."""
    path = node_dir / "eval_validation.json"
    return json.loads(path.read_text())["items"] if path.is_file() else []
