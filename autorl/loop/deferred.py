"""Bookkeeping that need not hold up the next stage: one background thread, in order.

Rendering a stage's curves takes longer than training a small stage does; nothing the
search decides depends on the picture, so it is drawn while the next stage runs. Only the
drawing happens in the background: what follows it (logging the file to MLflow, telling
the observers) runs on the thread that calls ``collect`` or ``drain``, the controller's,
which alone touches the tracker and the observers. The session waits for what is left
before it ends. A task that fails is reported, never raised into the loop: a missing
figure must not stop a session.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


class Deferred:
    def __init__(self, notify: Callable[[str], None]):
        self.notify = notify
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autorl-deferred")
        self.pending: list[tuple[str, Future, Callable[[Any], None] | None]] = []

    def submit(self, what: str, task: Callable[..., Any], *args, then: Callable[[Any], None] | None = None) -> None:
        """Run ``task(*args)`` in the background; ``then(result)`` later, on the collecting thread."""
        self.pending.append((what, self.pool.submit(task, *args), then))

    def collect(self, wait: bool = False) -> None:
        """Finish what has been drawn (everything, with ``wait``) on the calling thread."""
        waiting = []
        for what, future, then in self.pending:
            if not (wait or future.done()):
                waiting.append((what, future, then))
                continue
            try:
                result = future.result()
                if then is not None:
                    then(result)
            except Exception as exc:  # noqa: BLE001 - reported, not raised: see the module docstring
                self.notify(f"{what} failed: {exc}")
        self.pending = waiting

    def drain(self) -> None:
        """Wait for everything submitted so far and finish it."""
        self.collect(wait=True)
