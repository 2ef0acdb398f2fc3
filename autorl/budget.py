"""The session budget: stages trained and wall-clock seconds.

A stage is charged when it is launched, whether it succeeds or not: a crash spent
the compute too. Branching from a checkpoint costs one stage, not the whole path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autorl.goals import Goals


@dataclass
class Budget:
    max_stages: int
    max_seconds: float | None = None
    spent_stages: int = 0
    started: float = field(default_factory=time.monotonic)
    goals: Goals = field(default_factory=Goals)  # a target or patience may end the session sooner

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def seconds_left(self) -> float | None:
        return None if self.max_seconds is None else max(0.0, self.max_seconds - self.elapsed)

    def exhausted(self) -> str | None:
        """Why no further stage may start, or None."""
        if self.spent_stages >= self.max_stages:
            return f"stage budget spent ({self.spent_stages}/{self.max_stages})"
        if self.seconds_left is not None and self.seconds_left <= 0:
            return f"time budget spent ({self.max_seconds:.0f}s)"
        return None

    def charge_stage(self) -> None:
        self.spent_stages += 1

    def stage_wall_seconds(self, stage_limit: float) -> float:
        """A stage's wall budget: the template's limit, cut to the time the session has left."""
        left = self.seconds_left
        return stage_limit if left is None else max(1.0, min(stage_limit, left))

    def describe(self) -> str:
        left = self.seconds_left
        text = f"{self.spent_stages} of {self.max_stages} stages spent"
        return text + (f", {left:.0f}s of wall time left" if left is not None else "")
