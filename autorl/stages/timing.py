"""Where a stage's wall time goes: start-up, GRPO steps, saving, evaluation, bookkeeping.

The controller reads the clock as a stage's events reach it (launch, first logged step,
TRL's end-of-training summary, process exit, evaluation), so the numbers cost nothing
inside the trial and need nothing from ``train.py`` beyond the metrics it already logs.
Events are seen when the metrics file is polled (every 50 ms), which bounds their error.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

TRAINED_KEY = "train_runtime"  # TRL logs it once, when trainer.train() returns


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class StageClock:
    """Monotonic timestamps of one stage's events, and what the trainer said it spent."""

    launched: float = 0.0
    first_step: float | None = None
    trained: float | None = None
    exited: float | None = None
    train_runtime: float | None = None  # seconds inside trainer.train(), as TRL reports them

    def launch(self) -> None:
        self.launched = time.monotonic()

    def saw(self, record: dict) -> None:
        """A metrics record arrived: the first marks the first step, TRL's summary the end."""
        now = time.monotonic()
        if self.first_step is None and "step" in record and TRAINED_KEY not in record:
            self.first_step = now
        if TRAINED_KEY in record and isinstance(record[TRAINED_KEY], (int, float)):
            self.trained, self.train_runtime = now, float(record[TRAINED_KEY])

    def exit(self) -> None:
        self.exited = time.monotonic()

    def timing(self) -> dict[str, float]:
        """``start_s`` launch → first logged step, ``train_s`` first step → end of training,
        ``save_s`` end of training → exit (saving the checkpoint, tearing down),
        ``stage_wall_s`` launch → exit, ``steps_s`` the trainer's own time in ``train()``."""
        values: dict[str, float] = {}
        if self.exited is not None:
            values["stage_wall_s"] = self.exited - self.launched
        if self.first_step is not None:
            values["start_s"] = self.first_step - self.launched
            if self.trained is not None:
                values["train_s"] = self.trained - self.first_step
        if self.trained is not None and self.exited is not None:
            values["save_s"] = self.exited - self.trained
        if self.train_runtime is not None:
            values["steps_s"] = self.train_runtime
        return {key: round(value, 3) for key, value in values.items()}


def productive_seconds(timing: dict) -> float:
    """Time spent doing the work itself: GRPO steps and evaluation generation."""
    return float(timing.get("steps_s", 0.0)) + float(timing.get("eval_generation_s", 0.0))
