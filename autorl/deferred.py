"""Bookkeeping that need not hold up the next stage: one background thread, in order.

Rendering a stage's curves takes longer than training a small stage does; nothing the
search decides depends on the picture, so it is drawn and logged while the next stage
runs. The session waits for what is left before it ends. A task that fails is reported,
never raised into the loop: a missing figure must not stop a session.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


class Deferred:
    def __init__(self, notify: Callable[[str], None]):
        self.notify = notify
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="autorl-deferred")
        self.pending: list[Future] = []

    def submit(self, what: str, task: Callable[..., object], *args) -> None:
        self.pending = [f for f in self.pending if not f.done()]
        self.pending.append(self.pool.submit(self._guarded, what, task, *args))

    def _guarded(self, what: str, task: Callable[..., object], *args) -> None:
        try:
            task(*args)
        except Exception as exc:  # noqa: BLE001 - reported, not raised: see the module docstring
            self.notify(f"{what} failed: {exc}")

    def drain(self) -> None:
        """Wait for everything submitted so far."""
        for future in self.pending:
            future.result()
        self.pending.clear()
