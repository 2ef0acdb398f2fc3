"""Stages side by side: worker threads train and score, the controller's thread records.

The search state (tree, proposer, tracker, observers, the MLflow client) is touched by
one thread only. Each running stage's work (training, then scoring on validation)
happens in a worker thread that reports back through one queue: per-step records,
phase changes and, at the end, the stage's result. The controller drains the queue
between decisions, so a stage that finishes while another still trains is recorded at
once and the next proposal already knows it.

With one slot this is the sequential loop: propose, run, record, propose again.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

STOP_GRACE_S = 30.0  # a stopped stage kills its trial within the executor's grace (SIGTERM, then SIGKILL)


@dataclass
class Event:
    kind: str  # "step" (payload: a metrics record), "phase" (payload: its name), "done" (payload: the Future)
    node_id: str
    payload: Any


class StageSlots:
    """At most ``size`` stages at once, each in its own worker thread."""

    def __init__(self, size: int = 1):
        self.size = max(1, size)
        self.pool = ThreadPoolExecutor(self.size, thread_name_prefix="stage")
        self.events: queue.Queue[Event] = queue.Queue()
        self.running: dict[str, Future] = {}
        self.stopping = threading.Event()  # set on a stop: running stages kill their trials and return

    @property
    def free(self) -> int:
        return self.size - len(self.running)

    def start(self, node_id: str, work: Callable[[], Any]) -> None:
        future = self.pool.submit(work)
        self.running[node_id] = future
        future.add_done_callback(lambda done: self.events.put(Event("done", node_id, done)))

    def post(self, kind: str, node_id: str, payload: Any) -> None:
        """From a worker thread: something the controller's thread should hear."""
        self.events.put(Event(kind, node_id, payload))

    def next_event(self, timeout: float | None) -> Event | None:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        if event.kind == "done":
            self.running.pop(event.node_id, None)
        return event

    def stop(self) -> None:
        """Ask every running stage to stop, and wait for their threads (their trials are killed)."""
        self.stopping.set()
        for future in list(self.running.values()):
            try:
                future.exception(timeout=STOP_GRACE_S)
            except Exception:  # noqa: BLE001 - a stage that does not stop in time is left to die with us
                pass

    def close(self) -> None:
        self.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)
