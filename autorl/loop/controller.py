"""The research loop.

    select parent (tree policy) -> propose -> validate -> launch stage -> stream metrics
      -> score checkpoint (frozen evaluator, validation split) -> record -> repeat
    at the end: score the best node and the base model on the test split.

With ``--parallel N`` up to N stages train at once (``autorl/loop/slots.py``): the loop
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

from autorl import faults
from autorl.config import SessionConfig
from autorl.errors import USER_ERRORS, ContractError, FrozenFileError, SearchExhausted
from autorl.loop.approval import Gate
from autorl.loop.budget import Budget
from autorl.loop.channel import POLL_S
from autorl.loop.collaborators import Collaborators
from autorl.loop.deferred import Deferred
from autorl.loop.ledger import Ledger
from autorl.loop.lifecycle import StageLifecycle
from autorl.loop.noise_probe import NoiseProbe, probe_wanted
from autorl.loop.observer import Observer
from autorl.loop.reconcile import in_flight
from autorl.loop.retention import Retention
from autorl.loop.review import Review
from autorl.loop.scoring import Scoring
from autorl.loop.slots import Event, StageSlots
from autorl.stages.executor import StageHooks
from autorl.stages.spec import TrialSpec
from autorl.stages.stage import StageOutcome, StageWork
from autorl.stages.template import Template
from autorl.stages.timing import TRAINED_KEY, productive_seconds, utc_now
from autorl.storage.earlier_sessions import Memory
from autorl.storage.lock import SessionLock
from autorl.storage.session_files import NOISE_TAG
from search.importance import param_importance
from search.proposers import Proposal, ProposalDeferred, ProposalDropped
from search.tree import Node, Status, Tree

MAX_BREACHES_IN_A_ROW = 2
MAX_DROPPED_IN_A_ROW = 5
MIN_FREE_BYTES = 512 * 2**20  # a stage writes a checkpoint and logs; below this, stop cleanly


class Controller:
    def __init__(self, config: SessionConfig, template: Template, parts: Collaborators, session_run_id: str, *,
                 budget: Budget, observer: Observer | None = None, gate: Gate | None = None, tree: Tree | None = None,
                 lock: SessionLock | None = None):
        self.config, self.template, self.parts, self.budget = config, template, parts, budget
        self.session_run_id = session_run_id
        self.observer = observer or Observer()
        self.gate = gate or Gate("none")
        self.tree = tree or Tree()
        self.lock = lock
        self.status, self.reason, self.resumable = "running", "", True
        self.dropped_in_a_row = 0  # proposals dropped since the last one that ran
        self.breaches = 0  # stages in a row that failed because the template broke its contract
        self.phases: dict[str, str] = {}  # of each running stage: starting, training, saving, evaluating
        self.checked_out: str | None = None  # the train.py commit the running stages use
        self.slots = StageSlots(parts.executor.slot_count(config.parallel))
        self.deferred = Deferred(self.observer.message)
        self.stages = StageLifecycle(config, template, self.tree, parts, session_run_id, budget, self.observer,
                                     self.deferred)
        self.review = Review(self.gate, parts, template.space, session_run_id, config.session_dir, self.observer)
        self.ledger = Ledger(budget, self.tree, parts.tracker, session_run_id, self.slots.size)
        self.retention = Retention(config.keep_checkpoints, self.tree, self.stages, parts.proposer, parts.policy,
                                   budget, self.observer)
        self.probe = NoiseProbe(probe_wanted(config), parts.noise)
        self.scoring = Scoring(parts.executor.evaluator, template.base_model_dir(parts.workspace.path), self.stages,
                               self.tree, parts.tracker, session_run_id, self.ledger, self.observer)

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> Tree:
        self.observer.session_started(self.config.name, self.tree, self.budget)
        for line in self.parts.executor.describe(self.slots.size, self.config.parallel):
            self.observer.message(line)
        self.observer.message(f"memory: {Memory.load(self.config.session_dir).summary()}")
        self.note_noise()
        try:
            self.parts.executor.open()
            if self.tree.base_score is None or not self.scoring.has_base_items():
                self.scoring.base()
            self.reconcile()
            while (reason := self.stop_reason()) is None:
                if full := self.disk_full():
                    self.finish("stopped", full)
                    return self.tree
                if self.slots.free <= 0:
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
            self.scoring.test()
            self.scoring.publish(self.config.register_as)
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

    def stop_reason(self) -> str | None:
        """Why no further stage starts, decided on settled steps: a running stage's reservation
        may be more than it trains, so while one runs the loop waits for it before stopping."""
        while (reason := self.budget.exhausted() or self.budget.goals.met(self.tree)) and self.slots.running:
            self.handle_events(until_one_ends=True)
        return reason

    def propose_next(self) -> Node | None:
        """The next stage, proposed, reviewed and charged to the budget, not yet started
        (None when the proposal was dropped or rejected, or the proposer waits for a
        running stage to end)."""
        self.gate.wait_while_paused(while_waiting=self.handle_events)
        self.check_stop()
        proposal = self.probe.proposal(self.tree, self.budget) or self.ask_proposer()
        if proposal is None:
            return None
        self.retention.waiting = proposal.parent  # its checkpoint stays while a person decides
        try:
            reviewed = self.review.consider(proposal, self.tree, while_waiting=self.handle_events,
                                            check_stop=self.check_stop)
        finally:
            self.retention.waiting = None
        if reviewed is None:
            self.probe.declined = self.probe.declined or proposal.repeat_of is not None
            return None
        proposal = self.fit_to_budget(reviewed.proposal)
        faults.point("proposal_accepted")
        node = self.stages.create(proposal, reviewed.decision)
        self.review.accepted(node, reviewed)
        self.budget.charge_stage(node.id, self.template.stage_steps(node.hyperparameters))
        return node

    def ask_proposer(self) -> Proposal | None:
        """The proposer's next stage from the tree policy's pick (None when it was dropped, or
        the proposer waits for a running stage to end)."""
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
            self.dropped(exc)
            return None
        self.dropped_in_a_row = 0
        return proposal

    def dropped(self, exc: ProposalDropped) -> None:
        """A proposal that cannot run (invalid, a duplicate): nothing is charged, so many in a
        row end the search instead of looping."""
        self.observer.message(str(exc))
        self.stages.log_usage()
        self.dropped_in_a_row += 1
        if self.dropped_in_a_row >= MAX_DROPPED_IN_A_ROW:
            raise SearchExhausted(f"{self.dropped_in_a_row} proposals in a row were dropped, the last: {exc}") from exc

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
            spec = self.stages.spec(node, fetched_elsewhere=self.parts.executor.fetches_checkpoints)
            self.parts.workspace.checkout_train_script(node.commit)
            self.checked_out = node.commit
            self.set_phase(node, "starting")
        self.slots.start(node.id, lambda: self.work(node, spec, outcome))

    def work(self, node: Node, spec: TrialSpec | None, outcome: StageOutcome | None) -> StageWork:
        """In a worker thread: train (unless done) and score on validation. Touches nothing
        the controller's thread reads, and says what happened through the slots' queue."""
        hooks = StageHooks(on_step=lambda record: self.heard_step(node.id, record),
                           on_phase=lambda phase: self.slots.post("phase", node.id, phase),
                           should_stop=lambda: self.gate.stop_requested.is_set() or self.slots.stopping.is_set())
        if outcome is None:
            return self.parts.executor.run(node.attempt, spec, hooks, node.mlflow_run_id)
        return self.parts.executor.score(outcome, self.stages.node_dir(node.id), hooks)

    def heard_step(self, node_id: str, record: dict) -> None:
        faults.point("mid_training")
        self.slots.post("step", node_id, record)

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
            if TRAINED_KEY in event.payload:
                self.set_phase(node, "saving")
            elif self.phases.get(node.id) == "starting":
                self.set_phase(node, "training")
            self.observer.step(node, event.payload)
        elif event.kind == "phase":
            self.set_phase(node, event.payload)
        else:
            self.conclude(node, event.payload.result())  # a stage's internal error is raised here
            return True
        return False

    def set_phase(self, node: Node, phase: str) -> None:
        self.phases[node.id] = phase
        self.observer.stage_phase(node, phase)

    def conclude(self, node: Node, work: StageWork) -> None:
        """Record a stage that ended (autorl/loop/lifecycle.py), and count a broken contract: one
        fails its node; the same again in the next stage is the template's bug, not bad
        luck, and stops the session instead of spending the budget on it."""
        breach = self.stages.conclude(node, work)
        self.phases.pop(node.id, None)
        self.ledger.add(productive_seconds(node.timing))
        self.ledger.log(step=len(self.tree.nodes))
        self.observer.stage_finished(node, self.tree)
        self.retention.prune()
        if node.frozen_violation:
            raise FrozenFileError(node.reason)
        if node.repeat_of:
            self.note_noise()
        self.breaches = self.breaches + 1 if breach else 0
        if self.breaches >= MAX_BREACHES_IN_A_ROW:
            raise ContractError(f"{self.breaches} stages in a row broke the template contract; the last: "
                                f"{node.reason}. Fix the template and start a new session")

    def note_noise(self) -> None:
        """Say what the verdicts count as seed noise: on the first screen, and on the session
        run for `show` and the report."""
        summary = self.parts.noise.summary(self.tree)
        self.observer.message(f"seed noise: {summary}")
        self.parts.tracker.set_tags(self.session_run_id, {NOISE_TAG: summary})

    def reconcile(self) -> None:
        """Finish what a killed controller left in flight (autorl/loop/reconcile.py)."""
        for carry in in_flight(self.tree, self.parts.executor, self.stages, self.observer):
            while self.slots.free <= 0:  # a smaller --parallel than before the stop: one at a time as slots free
                self.handle_events(until_one_ends=True)
            if carry.follow:
                self.start(carry.node)
            else:
                self.launch(carry.node, carry.finished)
        self.ledger.log(step=len(self.tree.nodes))

    def check_stop(self) -> None:
        """A stop asked for from another thread (the TUI's quit) ends the run like Ctrl-C."""
        if self.gate.stop_requested.is_set():
            raise KeyboardInterrupt

    def disk_full(self) -> str | None:
        free = shutil.disk_usage(self.config.session_dir).free
        if free < MIN_FREE_BYTES:
            return (f"disk nearly full ({free / 2**30:.2f} GiB free in {self.config.session_dir}); "
                    "free space, then resume")
        return None

    def last_failure(self) -> str:
        failed = [n for n in self.tree.nodes.values() if n.status == Status.FAILED]
        return f"{failed[-1].id}: {failed[-1].reason}" if failed else "every proposal was dropped or rejected"

    # -- the end ------------------------------------------------------------------------------

    def finish(self, status: str, reason: str, resumable: bool = True) -> None:
        """End the session: running stages are killed (``resume`` trains them again), what
        mattered and what was spent are logged, the report is written, the lock released."""
        self.status, self.reason, self.resumable = status, reason, resumable
        self.slots.close()
        self.deferred.drain()
        self.record_importance()
        self.ledger.log()
        for node in self.tree.nodes.values():
            if node.status == Status.RUNNING:
                self.stages.transition(node, Status.INTERRUPTED, reason)
        tracker = self.parts.tracker
        if not resumable:
            tracker.set_tags(self.session_run_id, {"autorl.resumable": "no"})
        tracker.end_session(self.session_run_id, status, reason)
        self.parts.executor.close()
        self.write_report()
        if self.lock is not None:
            self.lock.release()
        self.observer.session_finished(self.tree, status, reason)

    def record_importance(self) -> None:
        """Which knobs mattered in this session (search/importance.py): a session tag, and a line."""
        found = param_importance(self.tree, self.template.space, self.config.seed)
        if found is not None:
            self.parts.tracker.set_tags(self.session_run_id, {"autorl.importance": json.dumps(found)})
            self.observer.message("what mattered: " + ", ".join(f"{n} {s:.0%}" for n, s in found.items()))

    def write_report(self) -> None:
        """The session report, also after a stop; a failure to draw it is reported, never
        raised: the session's record is already complete."""
        if self.parts.report is None:
            return
        try:
            paths = self.parts.report()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.observer.message(f"report not written: {exc}")
            return
        self.observer.message(f"report: {paths['html']}")
