"""What a resumed session finds in flight, and what becomes of each such node.

A node whose Ray job outlived the stop is followed; a node whose stage finished
training before the stop is scored, not retrained (and charged its steps once, when it
is recorded); a node whose stage was cut short is
trained again once, under a new MLflow run, without charging the budget a second time;
one cut short twice fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from autorl.loop.lifecycle import StageLifecycle
from autorl.loop.observer import Observer
from autorl.stages.executor import Executor
from autorl.stages.stage import StageOutcome
from search.tree import Node, Status, Tree

MAX_ATTEMPTS = 2


@dataclass
class Carry:
    """A node to carry on with: follow its running job, score its finished stage, or train it again."""

    node: Node
    finished: StageOutcome | None = None  # its stage trained to the end before the stop
    follow: bool = False  # its stage still runs (a Ray job): wait for it, do not start it again


def in_flight(tree: Tree, executor: Executor, stages: StageLifecycle, observer: Observer) -> Iterator[Carry]:
    """Each node a stop left in flight, in order, decided one at a time (so a node is
    decided after the one before it has run)."""
    for node in [n for n in tree.nodes.values() if n.status in (Status.RUNNING, Status.INTERRUPTED)]:
        node_dir = stages.node_dir(node.id)
        if job := executor.outlived_stop(node.id, node.attempt, node.mlflow_run_id):
            observer.message(f"{node.id}: its Ray job {job} outlived the stop; following it")
            yield Carry(node, follow=True)
        elif (finished := executor.finished_outcome(node_dir)) is not None:
            observer.message(f"{node.id}: its stage had finished before the stop; scoring it")
            yield Carry(node, finished=finished)
        elif node.attempt >= MAX_ATTEMPTS:
            stages.give_up(node, "interrupted twice; not retried again")
        else:
            observer.message(f"{node.id}: its stage was cut short by the stop; training it again")
            stages.retry(node)
            yield Carry(node)
