"""The research loop.

    select parent (tree policy) -> propose -> validate -> launch stage -> stream metrics
      -> score checkpoint (frozen evaluator, validation split) -> record -> repeat
    at the end: score the best node and the base model on the test split.

With ``--parallel N`` up to N stages train at once (``autorl/slots.py``): the loop
proposes while a slot is free, and records each stage when it ends. The proposal and
the recording stay on the controller's thread; a stage's training and scoring run in
a worker thread. Stages with different ``train.py`` commits never overlap: the one
working tree holds one ``train.py`` at a time.

The controller owns no storage and no policy of its own: it is handed its proposer,
policy, stage runner, evaluator and tracker, so tests pass real lightweight ones.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from autorl import faults, records
from autorl.approval import Gate
from autorl.budget import Budget
from autorl.channel import POLL_S, proposal_key
from autorl.config import SessionConfig
from autorl.curves import read_records
from autorl.deferred import Deferred
from autorl.diagnose import RewardScale, diagnose
from autorl.errors import USER_ERRORS, ContractError, FrozenFileError, SearchExhausted
from autorl.evaluate import EvalResult, FrozenEvaluator
from autorl.lock import SessionLock
from autorl.noise import paired_comparison
from autorl.observer import Observer
from autorl.plots import plot_curves
from autorl.ray_stages import RayStages
from autorl.slots import Event, StageSlots
from autorl.spec import TrialSpec
from autorl.stage import StageOutcome, StageRunner, StageWork, score_trained
from autorl.template import Template
from autorl.timing import TRAINED_KEY, productive_seconds, utc_now
from autorl.tracking import Tracker
from autorl.workspace import Workspace
from search.errors import ProposalError
from search.importance import param_importance
from search.policy import BestFirstPolicy
from search.proposers import Proposal, ProposalDeferred, ProposalDropped, Proposer
from search.tree import Decision, Node, Status, Tree

MAX_BREACHES_IN_A_ROW = 2
MAX_DROPPED_IN_A_ROW = 5
MIN_FREE_BYTES = 512 * 2**20  # a stage writes a checkpoint and logs; below this, stop cleanly


@dataclass
class Collaborators:
    tracker: Tracker
    workspace: Workspace
    evaluator: FrozenEvaluator
    runner: StageRunner
    proposer: Proposer
    policy: BestFirstPolicy | None  # None when the proposer chooses parents itself (flat and greedy baselines)
    ray: RayStages | None = None  # --executor ray: stages train and score as jobs on a Ray cluster


class Controller:
    def __init__(
        self,
        config: SessionConfig,
        template: Template,
        parts: Collaborators,
        session_run_id: str,
        *,
        budget: Budget,
        observer: Observer | None = None,
        gate: Gate | None = None,
        tree: Tree | None = None,
        lock: SessionLock | None = None,
    ):
        self.config = config
        self.template = template
        self.parts = parts
        self.session_run_id = session_run_id
        self.budget = budget
        self.observer = observer or Observer()
        self.gate = gate or Gate("none")
        self.tree = tree or Tree()
        self.lock = lock
        self.rejected_proposals = 0
        self.resumable = True
        self.dropped_in_a_row = 0  # proposals dropped since the last one that ran
        self.breaches = 0  # stages in a row that failed because the template broke its contract
        self.status = "running"
        self.reason = ""
        self.phases: dict[str, str] = {}  # of each running stage: starting, training, saving, evaluating
        self.slots = StageSlots(self.slot_count())
        self.checked_out: str | None = None  # the train.py commit the running stages use
        self.deferred = Deferred(self.observer.message)
        self.reward_scale = RewardScale(declared=template.reward_width)
        for node in self.tree.nodes.values():  # a resumed session knows the rewards it has seen
            self.reward_scale.learn(read_records(self.node_dir(node.id) / "metrics.jsonl"))
        self.productive = sum(productive_seconds(n.timing) for n in self.tree.nodes.values())

    def slot_count(self) -> int:
        """``--parallel``, but never more stages at once than GPUs when the session has GPUs."""
        gpus = len(self.parts.runner.sandbox.gpus.gpus)
        return min(self.config.parallel, gpus) if gpus and self.parts.ray is None else self.config.parallel

    @property
    def session_dir(self) -> Path:
        return self.config.session_dir

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> Tree:
        self.observer.session_started(self.config.name, self.tree, self.budget)
        self.announce_execution()
        try:
            if self.tree.base_score is None:
                self.score_base()
            self.reconcile()
            while (reason := self.budget.exhausted() or self.budget.goals.met(self.tree)) is None:
                if full := self.disk_full():
                    self.finish("stopped", full)
                    return self.tree
                if self.slots.free == 0:
                    self.handle_events(until_one_ends=True)
                    continue
                try:
                    node = self.propose_next()
                except SearchExhausted as exc:  # the work done so far still gets its winner scored
                    reason = f"search exhausted: {exc}"
                    break
                if node is not None:
                    self.start(node)
            self.handle_events(until_all_end=True)  # stages already paid for finish and are recorded
            if not any(n.status == Status.SUCCEEDED for n in self.tree.nodes.values()):
                self.finish("failed", f"{reason}, and no stage succeeded: {self.last_failure()}", resumable=False)
                return self.tree
            self.score_on_test()
            self.finish("finished", reason)
        except KeyboardInterrupt:
            self.finish("stopped", "interrupted (Ctrl-C or SIGTERM)")
            raise
        except ContractError as exc:  # resuming would break the same way: the template must change
            self.finish("failed", str(exc), resumable=False)
            raise
        except USER_ERRORS as exc:
            self.finish("failed", str(exc))
            raise
        except Exception as exc:
            self.finish("failed", f"internal error: {exc!r}")
            raise
        return self.tree

    def announce_execution(self) -> None:
        """Where stages run: the sandbox tier, the Ray cluster, how many at once."""
        self.observer.message(self.parts.runner.sandbox.describe())
        if self.parts.ray is not None:
            self.observer.message(self.parts.ray.describe())
        if self.config.parallel > 1:
            cpus = self.parts.runner.sandbox.limits.cpus
            capped = self.slots.size < self.config.parallel
            self.observer.message(f"up to {self.slots.size} stages at once"
                                  + (f" (one per GPU; --parallel {self.config.parallel})" if capped else "")
                                  + (f", {cpus:g} CPUs each" if cpus else ""))

    def propose_next(self) -> Node | None:
        """The next stage, proposed, reviewed and charged to the budget, not yet started
        (None when the proposal was dropped or rejected, or the proposer waits for a
        running stage to end)."""
        self.gate.wait_while_paused(while_waiting=self.handle_events)
        self.check_stop()
        stages_left, stages = self.budget.stages_left(self.template.stage_steps(self.template.space.defaults()))
        parent = self.parts.policy.select(self.tree, stages_left, stages) if self.parts.policy else None
        try:
            proposal = self.parts.proposer.propose(self.tree, parent)
        except ProposalDeferred as exc:
            if not self.slots.running:
                raise SearchExhausted(f"the proposer waits for a running stage, and none runs: {exc}") from exc
            self.handle_events(until_one_ends=True)
            return None
        except ProposalDropped as exc:
            self.observer.message(str(exc))
            self.log_usage()
            self.dropped_in_a_row += 1
            if self.dropped_in_a_row >= MAX_DROPPED_IN_A_ROW:  # no budget is charged: this must not loop
                raise SearchExhausted(f"{self.dropped_in_a_row} proposals in a row were dropped, "
                                      f"the last: {exc}") from exc
            return None
        self.dropped_in_a_row = 0
        parent_node = self.tree.nodes.get(proposal.parent) if proposal.parent else None
        key = self.gate.key_for(proposal_key(proposal, len(self.tree.nodes)))
        if self.gate.needs_review(proposal):
            self.gate.publish(key, proposal, parent_node, self.proposal_diff(proposal, parent_node),
                              self.parts.proposer.name)
            self.observer.proposal_pending(proposal, parent_node, key)
        decision = self.gate.review(proposal, key, while_waiting=self.handle_events)
        self.check_stop()
        if decision.action == "reject":
            self.reject(proposal, decision)
            self.gate.settle(key)
            return None
        if decision.action == "edit":
            try:
                proposal = self.apply_edit(proposal, decision)
            except ProposalError as exc:  # an attached viewer's edit is validated there, but not trusted here
                self.reject(proposal, Decision("reject", f"edited values invalid: {exc}", None, decision.decided_by))
                self.gate.settle(key)
                return None
        proposal = self.fit_to_budget(proposal)
        faults.point("proposal_accepted")
        node = self.create_node(proposal, decision)
        self.gate.settle(key)
        self.budget.charge_stage(node.id, self.template.stage_steps(node.hyperparameters))
        return node

    def fit_to_budget(self, proposal: Proposal) -> Proposal:
        """A stage longer than the training steps left is shortened to fit, and says so
        (``exhausted`` ends the session before no stage fits at all)."""
        values = self.template.fit_steps(proposal.hyperparameters, self.budget.train_steps_left)
        if values is None or values == proposal.hyperparameters:
            return proposal
        name = self.template.space.named("steps")
        self.observer.message(f"{name} {proposal.hyperparameters[name]} → {values[name]}: shortened to the "
                              f"{self.budget.train_steps_left} training steps left")
        return proposal.model_copy(update={"hyperparameters": values})

    def proposal_diff(self, proposal: Proposal, parent: Node | None) -> str:
        return self.parts.workspace.diff_text(parent.commit if parent else None, proposal.train_py)

    def launch(self, node: Node, outcome: StageOutcome | None = None) -> Node:
        """Train (unless ``outcome`` says it already did), score, diagnose and record a node,
        waiting for it to end."""
        self.start(node, outcome)
        while node.id in self.slots.running:
            self.handle_events(until_one_ends=True)
        return node

    def start(self, node: Node, outcome: StageOutcome | None = None) -> None:
        """Start a node's stage in a free slot; ``handle_events`` records it when it ends."""
        if self.slots.running and node.commit != self.checked_out:
            self.observer.message(f"{node.id} runs another train.py: waiting for the running stages to end")
            self.handle_events(until_all_end=True)
        self.observer.stage_started(node, self.tree)
        node.timing = {"started_at": utc_now()}
        spec = None
        if outcome is None:
            spec = self.stage_spec(node)
            self.parts.workspace.checkout_train_script(node.commit)
            self.checked_out = node.commit
            self.set_phase(node, "starting")
        self.slots.start(node.id, lambda: self.work(node.id, spec, outcome))

    def handle_events(self, until_one_ends: bool = False, until_all_end: bool = False) -> None:
        """Hear the running stages: their steps and phases, and record each one that ended.

        Returns when nothing is waiting, or, with ``until_one_ends``, once a stage has been
        recorded, or, with ``until_all_end``, once none runs."""
        ended = False
        while True:
            if until_all_end and not self.slots.running:
                return
            if until_one_ends and (ended or not self.slots.running):
                return
            block = until_all_end or until_one_ends
            self.deferred.collect()  # finished plots are logged here, on this thread
            event = self.slots.next_event(timeout=POLL_S if block else 0)
            if event is None:
                if not block:
                    return
                self.check_stop()
                continue
            ended = self.handle(event) or ended

    def handle(self, event: Event) -> bool:
        """Act on one event from a stage; True when it ended the stage."""
        node = self.tree.nodes[event.node_id]
        if event.kind == "step":
            self.on_step(node, event.payload)
        elif event.kind == "phase":
            self.set_phase(node, event.payload)
        else:
            self.conclude(node, event.payload.result())  # a stage's internal error is raised here
            return True
        return False

    def work(self, node_id: str, spec: TrialSpec | None, outcome: StageOutcome | None) -> StageWork:
        """In a worker thread: train (unless done) and score on validation. Touches nothing
        the controller's thread reads, and says what happened through the slots' queue."""
        on_step = lambda record: self.heard_step(node_id, record)  # noqa: E731
        if self.parts.ray is not None and outcome is None:
            work = self.parts.ray.run(self.tree.nodes[node_id].attempt, spec, on_step, should_stop=self.stop_asked)
            faults.point("trained")
            return work
        if outcome is None:
            outcome = self.parts.runner.run(spec, self.node_dir(node_id), on_step=on_step, should_stop=self.stop_asked)
        faults.point("trained")
        if outcome.ok:
            self.slots.post("phase", node_id, "evaluating")
        return score_trained(self.parts.evaluator, outcome, self.node_dir(node_id))

    def stop_asked(self) -> bool:
        return self.gate.stop_requested.is_set() or self.slots.stopping.is_set()

    def heard_step(self, node_id: str, record: dict) -> None:
        faults.point("mid_training")
        self.slots.post("step", node_id, record)

    def conclude(self, node: Node, work: StageWork) -> None:
        """Record a stage that ended: its outcome and score, diagnosis, what the proposer learns."""
        outcome = work.outcome
        self.apply_outcome(node, outcome)
        node.timing = {**outcome.timing, "started_at": node.timing.get("started_at", utc_now())}
        breach = outcome.breach
        if outcome.ok:
            breach = self.apply_score(node, work)
        else:
            self.fail(node, outcome.reason)
        node.timing["ended_at"] = utc_now()
        self.phases.pop(node.id, None)
        self.productive += productive_seconds(node.timing)
        faults.point("evaluated")
        self.diagnose(node, outcome)
        self.parts.proposer.observe(self.tree, node)
        self.record(node, outcome)
        self.observer.stage_finished(node, self.tree)
        if node.frozen_violation:
            raise FrozenFileError(node.reason)
        self.count_breach(node, breach)

    def count_breach(self, node: Node, breach: bool) -> None:
        """One broken contract fails its node; the same again in the next stage is the
        template's bug, not bad luck, and stops the session (non-zero exit) instead of
        spending the budget on it."""
        self.breaches = self.breaches + 1 if breach else 0
        if self.breaches >= MAX_BREACHES_IN_A_ROW:
            raise ContractError(f"{self.breaches} stages in a row broke the template contract; the last: "
                                f"{node.reason}. Fix the template and start a new session")

    def last_failure(self) -> str:
        failed = [n for n in self.tree.nodes.values() if n.status == Status.FAILED]
        return f"{failed[-1].id}: {failed[-1].reason}" if failed else "every proposal was dropped or rejected"

    def check_stop(self) -> None:
        """A stop asked for from another thread (the TUI's quit) ends the run like Ctrl-C."""
        if self.gate.stop_requested.is_set():
            raise KeyboardInterrupt

    def reject(self, proposal: Proposal, decision: Decision) -> None:
        """A person said no: nothing runs, the proposer hears why, MLflow keeps the decision."""
        self.rejected_proposals += 1
        self.parts.proposer.withdraw(proposal, reason=decision.reason or "no reason given")
        self.log_decision(None, proposal, decision)
        self.observer.message(f"proposal rejected by {decision.decided_by}: {decision.reason or 'no reason given'}")

    def apply_edit(self, proposal: Proposal, decision: Decision) -> Proposal:
        """The person's values replace the proposer's (already validated by whoever edited them)."""
        values = self.template.space.check(decision.hyperparameters or {})
        self.parts.proposer.withdraw(proposal)  # the values it proposed do not run
        return proposal.model_copy(update={
            "hyperparameters": values, "optuna_trial": None,
            "rationale": f"{proposal.rationale} (values edited by {decision.decided_by})"})

    def log_decision(self, node: Node | None, proposal: Proposal, decision: Decision) -> None:
        entry = {"node": node.id if node else None, "parent": proposal.parent, **decision.to_dict(),
                 "proposed": proposal.hyperparameters}
        with (self.session_dir / "decisions.jsonl").open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        tracker = self.parts.tracker
        tracker.log_artifacts(self.session_run_id, [self.session_dir / "decisions.jsonl"])
        tracker.log_metrics(self.session_run_id, {"rejected_proposals": self.rejected_proposals},
                            step=len(self.tree.nodes))

    def reconcile(self) -> None:
        """Finish what a killed controller left in flight (nothing on a fresh session).

        A node whose stage finished training is scored, not retrained; a node whose
        stage was cut short is trained again once, under a new MLflow run, without
        charging the budget a second time.
        """
        for node in [n for n in self.tree.nodes.values() if n.status in (Status.RUNNING, Status.INTERRUPTED)]:
            if self.still_on_ray(node):
                job = self.parts.ray.submission_id(node.id, node.attempt)
                self.observer.message(f"{node.id}: its Ray job {job} outlived the stop; following it")
                self.start(node)
                continue
            finished = self.parts.runner.finished_outcome(self.node_dir(node.id))
            if finished is not None:
                self.observer.message(f"{node.id}: its stage had finished before the stop; scoring it")
                self.apply_outcome(node, finished)
                self.launch(node, finished)
                continue
            if node.attempt >= 2:
                self.fail(node, "interrupted twice; not retried again")
                self.record(node, StageOutcome(None, reason=node.reason))
                continue
            self.observer.message(f"{node.id}: its stage was cut short by the stop; training it again")
            self.parts.tracker.set_tags(node.mlflow_run_id, {"autorl.status": "interrupted",
                                                             "autorl.reason": "controller stopped mid-stage; re-run"})
            self.parts.tracker.end_node(node.mlflow_run_id, failed=True, killed=True)
            node.attempt += 1
            node.status = Status.RUNNING
            node.mlflow_run_id = self.parts.tracker.start_node(
                self.session_run_id, self.config.name, node.id, records.node_tags(node), node.hyperparameters,
                run_name=self.run_name(node))
            self.launch(node)

    def still_on_ray(self, node: Node) -> bool:
        return self.parts.ray is not None and self.parts.ray.outlived_stop(node.id, node.attempt,
                                                                           self.node_dir(node.id))

    def run_name(self, node: Node) -> str:
        """The node's MLflow run name: its path from the base model (``base › n001 › n004``)."""
        return " › ".join(["base", *(n.id for n in self.tree.path(node.id))])

    def disk_full(self) -> str | None:
        free = shutil.disk_usage(self.session_dir).free
        if free < MIN_FREE_BYTES:
            return f"disk nearly full ({free / 2**30:.2f} GiB free in {self.session_dir}); free space, then resume"
        return None

    # -- pieces -------------------------------------------------------------------------------

    def create_node(self, proposal: Proposal, decision: Decision | None = None) -> Node:
        parent = self.tree.nodes.get(proposal.parent) if proposal.parent else None
        hyperparameters = self.template.space.check(proposal.hyperparameters)
        node_id = self.tree.next_id()
        node = Node(
            id=node_id,
            parent=proposal.parent,
            depth=1 if parent is None else parent.depth + 1,
            hyperparameters=hyperparameters,
            seed=self.config.seed * 1000 + len(self.tree.nodes) + 1,
            proposer=self.parts.proposer.name,
            commit=self.commit_for(parent, proposal, node_id),
            step_offset=0 if parent is None else parent.step_offset + parent.steps,
            rationale=proposal.rationale,
            expected_effect=proposal.expected_effect,
            edited=proposal.train_py is not None,
            optuna_trial=proposal.optuna_trial,
            decision=decision if decision is not None and self.gate.needs_review(proposal) else None,
        )
        self.tree.add(node)
        node.mlflow_run_id = self.parts.tracker.start_node(
            self.session_run_id, self.config.name, node.id, records.node_tags(node), node.hyperparameters,
            run_name=self.run_name(node))
        if proposal.transcript:
            self.parts.tracker.log_text(node.mlflow_run_id, records.dumps(proposal.transcript), "llm_transcript.json")
        self.log_usage()
        if node.decision is not None:
            self.log_decision(node, proposal, node.decision)
        node.status = Status.RUNNING
        return node

    def commit_for(self, parent: Node | None, proposal: Proposal, node_id: str) -> str:
        """The train.py commit a node runs: its parent's, plus one new commit for an edit."""
        workspace = self.parts.workspace
        base_commit = parent.commit if parent else workspace.root_commit
        if proposal.train_py is None:
            return base_commit
        summary = (proposal.rationale or "edit").splitlines()[0][:72]
        return workspace.commit_train_script(proposal.train_py, f"{node_id}: {summary}")

    def log_usage(self) -> None:
        """The proposer's counters (LLM tokens, cost, dropped proposals) on the session run."""
        if usage := self.parts.proposer.usage():
            self.parts.tracker.log_metrics(self.session_run_id, usage, step=len(self.tree.nodes))

    def node_dir(self, node_id: str) -> Path:
        return self.session_dir / "nodes" / node_id

    def init_checkpoint(self, node: Node) -> Path:
        if node.parent is None:
            return self.template.base_model_dir(self.parts.workspace.path)
        return self.node_dir(node.parent) / "checkpoint"

    def stage_spec(self, node: Node) -> TrialSpec:
        node_dir = self.node_dir(node.id)
        spec = TrialSpec(
            node_id=node.id,
            init_checkpoint=str(self.init_checkpoint(node)),
            output_dir=str(node_dir),
            metrics_path=str(node_dir / "metrics.jsonl"),
            hyperparameters=node.hyperparameters,
            max_steps=self.template.stage_steps(node.hyperparameters),
            seed=node.seed,
            wall_seconds=self.budget.stage_wall_seconds(self.template.stage_wall_seconds),
        )
        node.planned_steps = spec.max_steps
        return spec

    def on_step(self, node: Node, record: dict) -> None:
        if TRAINED_KEY in record:
            self.set_phase(node, "saving")
        elif self.phases.get(node.id) == "starting":
            self.set_phase(node, "training")
        self.observer.step(node, record)

    def set_phase(self, node: Node, phase: str) -> None:
        self.phases[node.id] = phase
        self.observer.stage_phase(node, phase)

    def apply_outcome(self, node: Node, outcome: StageOutcome) -> None:
        node.seconds = outcome.result.wall_seconds if outcome.result else 0.0
        node.worker = outcome.result.worker if outcome.result else ""
        peak = outcome.result.peak_memory_bytes if outcome.result else None
        node.peak_memory_mb = round(peak / 2**20, 1) if peak else None
        for note in outcome.result.notes if outcome.result else []:
            self.observer.message(f"{node.id}: {note}")
        node.steps = max((int(r.get("step", 0)) for r in outcome.records), default=0)
        self.budget.settle(node.id, node.steps)
        rewards = [r["reward"] for r in outcome.records if isinstance(r.get("reward"), (int, float))]
        node.train_reward = rewards[-1] if rewards else None

    def apply_score(self, node: Node, work: StageWork) -> bool:
        """A trained node's validation score; True when the evaluator broke its contract."""
        if isinstance(work.refusal, FrozenFileError):
            self.fail(node, str(work.refusal))
            node.frozen_violation = True
            return False
        if work.refusal is not None:
            self.fail(node, str(work.refusal))
            return isinstance(work.refusal, ContractError)
        result = work.evaluation
        node.val_score, node.val_stderr, node.eval_engine = result.mean, result.stderr, result.engine
        node.eval_metrics = result.extra
        node.timing.update(eval_timing(result))
        node.status = Status.SUCCEEDED
        return False

    def eval_items(self, node_id: str | None) -> list[dict]:
        folder = self.session_dir / "base" if node_id is None else self.node_dir(node_id)
        path = folder / "eval_validation.json"
        return json.loads(path.read_text())["items"] if path.is_file() else []

    def diagnose(self, node: Node, outcome: StageOutcome) -> None:
        """Name what went wrong (or right) in this stage, against its parent on the same items."""
        node.comparison = paired_comparison(self.eval_items(node.id), self.eval_items(node.parent),
                                            stage_sd=self.template.stage_sd) if node.scored else None
        self.reward_scale.learn(outcome.records)
        node.diagnosis = diagnose(outcome.records, node.comparison, self.reward_scale)
        node_dir = self.node_dir(node.id)
        (node_dir / "diagnosis.json").write_text(json.dumps(
            {"findings": [f.to_dict() for f in node.diagnosis],
             "comparison": node.comparison.to_dict() if node.comparison else None}, indent=2))
        run_id = node.mlflow_run_id
        self.deferred.submit(f"{node.id}: curves plot", plot_curves, outcome.records,
                             self.node_dir(node.id) / "curves.png", f"{node.id} ← {node.parent or 'base'}",
                             then=lambda path: path and self.parts.tracker.log_artifacts(run_id, [path]))

    def evaluate(self, checkpoint: Path, split: str, out_dir: Path) -> EvalResult:
        return self.parts.evaluator.score(checkpoint, split, out_dir)

    def fail(self, node: Node, reason: str) -> None:
        node.status = Status.FAILED
        node.reason = reason
        self.observer.message(f"{node.id} failed: {reason}")

    def record(self, node: Node, outcome: StageOutcome) -> None:
        tracker, run_id = self.parts.tracker, node.mlflow_run_id
        tracker.log_step_records(run_id, outcome.records, offset=node.step_offset)
        tracker.log_metrics(run_id, records.node_metrics(node))
        node_dir = self.node_dir(node.id)
        diff = self.parts.workspace.diff_from_template(node.commit)
        (node_dir / "train_py.diff").write_text(diff)
        tracker.log_artifacts(run_id, [node_dir / name for name in
                                       ("spec.json", "metrics.jsonl", "stdout.log", "stderr.log", "train_py.diff",
                                        "eval_validation.json", "eval_validation_stderr.log", "diagnosis.json")])
        tracker.set_tags(run_id, records.node_tags(node))
        tracker.end_node(run_id, failed=node.status == Status.FAILED)
        tracker.log_metrics(self.session_run_id, {"session_seconds": self.budget.elapsed, **self.spending()},
                            step=len(self.tree.nodes))

    def record_importance(self) -> None:
        """Which knobs mattered in this session (search/importance.py): a session tag, and a line."""
        found = param_importance(self.tree, self.template.space, self.config.seed)
        if found is not None:
            self.parts.tracker.set_tags(self.session_run_id, {"autorl.importance": json.dumps(found)})
            self.observer.message("what mattered: " + ", ".join(f"{n} {s:.0%}" for n, s in found.items()))

    def spending(self) -> dict[str, float]:
        """What the session has spent, as session-run metrics: stages, GRPO steps trained, overhead."""
        trained = sum(n.steps for n in self.tree.nodes.values())
        return {"stages_spent": self.budget.spent_stages, "train_steps_spent": trained, **self.overhead()}

    def overhead(self) -> dict[str, float]:
        """The share of the session's slot time (wall time × ``--parallel``) not spent in GRPO
        steps or evaluation generation."""
        capacity = self.budget.elapsed * self.slots.size
        share = max(0.0, 1.0 - self.productive / capacity) if capacity > 0 else 0.0
        return {"productive_seconds": round(self.productive, 3), "overhead_share": round(share, 4)}

    def score_base(self) -> None:
        """The base model's validation score: the reference every stage is compared to."""
        result = self.evaluate(self.template.base_model_dir(self.parts.workspace.path), "validation",
                               self.session_dir / "base")
        self.tree.base_score, self.tree.base_stderr = result.mean, result.stderr
        self.productive += eval_timing(result)["eval_generation_s"]
        self.parts.tracker.log_metrics(self.session_run_id, {"base_score": result.mean, "base_stderr": result.stderr})
        if result.engine:
            self.parts.tracker.set_tags(self.session_run_id, {"autorl.eval_engine": result.engine})
        engine = f" ({result.engine})" if result.engine else ""
        self.observer.message(f"base model: validation {result.mean:.3f} ± {result.stderr:.3f}{engine}")

    def score_on_test(self) -> None:
        """Score the best node, and the base model, once on the test split."""
        best = self.tree.best()
        if best is None:
            self.observer.message("no stage succeeded: nothing to score on the test split")
            return
        test = self.evaluate(self.node_dir(best.id) / "checkpoint", "test", self.node_dir(best.id))
        base = self.evaluate(self.template.base_model_dir(self.parts.workspace.path), "test", self.session_dir / "base")
        best.test_score, best.test_stderr = test.mean, test.stderr
        self.productive += eval_timing(test)["eval_generation_s"] + eval_timing(base)["eval_generation_s"]
        tracker = self.parts.tracker
        tracker.log_metrics(best.mlflow_run_id, {"test_score": test.mean, "test_stderr": test.stderr})
        tracker.log_artifacts(best.mlflow_run_id, [test.path])
        tracker.log_metrics(self.session_run_id, {
            "best_val_score": best.val_score, "best_test_score": test.mean, "best_test_stderr": test.stderr,
            "base_test_score": base.mean, "val_test_gap": best.val_score - test.mean,
        })
        tracker.set_tags(self.session_run_id, {"autorl.best_node": best.id})
        self.observer.message(
            f"best {best.id}: validation {best.val_score:.3f}, test {test.mean:.3f} ± {test.stderr:.3f} "
            f"(base test {base.mean:.3f}; val-test gap {best.val_score - test.mean:+.3f})"
        )

    def finish(self, status: str, reason: str, resumable: bool = True) -> None:
        self.status, self.reason, self.resumable = status, reason, resumable
        self.slots.close()  # running stages (a stop, a failure) kill their trials: resume trains them again
        self.deferred.drain()
        tracker = self.parts.tracker
        self.record_importance()
        tracker.log_metrics(self.session_run_id, {"session_seconds": self.budget.elapsed, **self.spending()})
        for node in self.tree.nodes.values():
            if node.status == Status.RUNNING:  # cut short: `resume` trains it again
                node.status = Status.INTERRUPTED
                tracker.set_tags(node.mlflow_run_id, {"autorl.status": "interrupted", "autorl.reason": reason})
                tracker.end_node(node.mlflow_run_id, failed=True, killed=True)
        if not resumable:
            tracker.set_tags(self.session_run_id, {"autorl.resumable": "no"})
        tracker.end_session(self.session_run_id, status, reason)
        self.parts.runner.sandbox.stop_worker()
        self.write_report()
        if self.lock is not None:
            self.lock.release()
        self.observer.session_finished(self.tree, status, reason)


    def write_report(self) -> None:
        """The session report (autorl/session_report.py), also after a stop; a failure to draw
        it is reported, never raised: the session's record is already complete."""
        from autorl.session_report import report_session

        try:
            paths = report_session(self.parts.tracker, self.config.name)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.observer.message(f"report not written: {exc}")
            return
        self.observer.message(f"report: {paths['html']}")


def eval_timing(result: EvalResult) -> dict[str, float]:
    """``eval_s`` the evaluator's process launch to exit, ``eval_generation_s`` its decoding
    (or, when it does not say, its own in-process time)."""
    generation = result.generation_seconds if result.generation_seconds is not None else result.seconds
    return {"eval_s": round(result.wall_seconds, 3), "eval_generation_s": round(float(generation), 3)}
