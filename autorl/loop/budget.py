"""The session budget: training compute (GRPO optimizer steps), stages and wall-clock seconds.

Compute is the unit a proposer cannot game: a 40-step stage costs twice a 20-step one.
A stage reserves the steps it plans when it is launched and is charged what it trained
when it ends (a crash, the steps that ran before it). The session stops only on settled
steps: the controller waits for the stages in flight before it decides, so a session
killed and resumed (which has no reservations) stops where the uninterrupted one does. A proposal larger than what is
left is shrunk to fit (its steps parameter set to the largest value the space allows
within it); the session ends when not even the smallest stage fits. ``--stages`` stays a
cap on the number of stages and ``--time`` on wall-clock seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from autorl.loop.goals import Goals


def session_budget(config, template, goals: Goals | None = None) -> "Budget":
    """The budget a session's options give, for a template's stage lengths."""
    choices = tuple(template.stage_step_choices())
    return Budget(config.stages, config.time_budget_s, config.train_steps, min_stage_steps=choices[0],
                  goals=goals or Goals(), step_choices=choices)


MAX_NAMED_CHOICES = 8  # stage lengths named one by one in the proposer's budget line


def _either(values: list[int]) -> str:
    words = [f"{v} steps" if i == len(values) - 1 else str(v) for i, v in enumerate(values)]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


@dataclass
class Budget:
    max_stages: int | None = None
    max_seconds: float | None = None
    max_train_steps: int | None = None
    min_stage_steps: int = 1  # the smallest stage the space allows: below it, nothing fits
    spent_stages: int = 0
    spent_train_steps: int = 0  # trained by ended stages, plus what running ones reserved
    reserved: dict[str, int] = field(default_factory=dict)  # node id -> steps reserved while it runs
    started: float = field(default_factory=time.monotonic)
    goals: Goals = field(default_factory=Goals)  # a target or patience may end the session sooner
    step_choices: tuple[int, ...] = ()  # every stage length the space allows (named when they are few)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def seconds_left(self) -> float | None:
        return None if self.max_seconds is None else max(0.0, self.max_seconds - self.elapsed)

    @property
    def settled_train_steps(self) -> int:
        """Steps trained by stages that ended (what the running ones reserved left out)."""
        return self.spent_train_steps - sum(self.reserved.values())

    @property
    def train_steps_left(self) -> int | None:
        return None if self.max_train_steps is None else max(0, self.max_train_steps - self.spent_train_steps)

    def exhausted(self) -> str | None:
        """Why no further stage may start, or None."""
        if self.max_stages is not None and self.spent_stages >= self.max_stages:
            return f"stage budget spent ({self.spent_stages}/{self.max_stages})"
        left = self.train_steps_left
        if left is not None and left < self.min_stage_steps:
            return (f"training-step budget spent ({self.settled_train_steps} of {self.max_train_steps} steps trained"
                    + (f", {self.spent_train_steps - self.settled_train_steps} reserved by running stages"
                       if self.reserved else "")
                    + f"; the smallest stage takes {self.min_stage_steps})")
        if self.seconds_left is not None and self.seconds_left <= 0:
            return f"time budget spent ({self.max_seconds:.0f}s)"
        return None

    def fits(self, steps: int) -> bool:
        left = self.train_steps_left
        return left is None or steps <= left

    def charge_stage(self, node_id: str, planned_steps: int) -> None:
        """A stage launches: one stage spent, its planned steps reserved."""
        self.spent_stages += 1
        self.reserve(node_id, planned_steps)

    def reserve(self, node_id: str, planned_steps: int) -> None:
        self.reserved[node_id] = planned_steps
        self.spent_train_steps += planned_steps

    def settle(self, node_id: str, trained_steps: int) -> None:
        """A stage ended: charge what it trained instead of what it reserved."""
        self.spent_train_steps += trained_steps - self.reserved.pop(node_id, 0)

    def stages_left(self, stage_steps: int) -> tuple[int | None, int | None]:
        """Stages left and in all, counting a stage as ``stage_steps`` where the budget is
        in steps (for the policy's broad-early, deep-late schedule); None without a cap."""
        left, total = [], []
        if self.max_stages is not None:
            left.append(self.max_stages - self.spent_stages)
            total.append(self.max_stages)
        if self.max_train_steps is not None:
            left.append((self.train_steps_left or 0) // max(1, stage_steps))
            total.append(self.max_train_steps // max(1, stage_steps))
        return (min(left), min(total)) if left else (None, None)

    def stage_wall_seconds(self, stage_limit: float) -> float:
        """A stage's wall budget: the template's limit, cut to the time the session has left."""
        left = self.seconds_left
        return stage_limit if left is None else max(1.0, min(stage_limit, left))

    def for_proposer(self) -> str:
        """What a proposer needs to plan the end: what is left, and that the session ends, without
        another proposal, once not even the smallest stage fits."""
        text = self.describe()
        left = self.train_steps_left
        if left is None:
            return text + self.last_stage_note()
        return (f"{text}. The session ends when fewer than {self.min_stage_steps} steps are left: a stage that "
                f"leaves less is the last one, its result is not shown to you, and then the node with the best "
                f"validation score is scored once on the test split. A stage longer than what is left is "
                f"shortened to fit.{self.last_stage_note()}")

    def last_stage_note(self) -> str:
        """Name the last stage as the last, so it is not spent on a control whose result no one sees."""
        last = " This proposal is the last stage of the session: its result will not be shown to you, so spend it " \
               "where you expect the best validation score, not on a control."
        if self.max_stages is not None and self.max_stages - self.spent_stages <= 1:
            return last
        left = self.train_steps_left
        if left is None:
            return ""
        if left < 2 * self.min_stage_steps:
            return last
        room = left - self.min_stage_steps
        if self.step_choices and len(self.step_choices) <= MAX_NAMED_CHOICES:
            return self.named_choices_note(left)
        return (f" A stage of more than {room} steps leaves fewer than {self.min_stage_steps} and is the last; one of "
                f"{room} or fewer leaves room for another whose result you will see.")

    def named_choices_note(self, left: int) -> str:
        """The same, in the stage lengths the space allows: a threshold none of them sits at misleads."""
        fitting = [c for c in self.step_choices if c <= left]
        room = [c for c in fitting if left - c >= self.min_stage_steps]
        last = [c for c in fitting if left - c < self.min_stage_steps]
        if not last:
            return ""
        verb = "leaves" if len(room) == 1 else "leave"
        return (f" Of the stage lengths the space allows, {_either(room)} {verb} room for another stage whose result "
                f"you will see; {_either(last)} is the last.")

    def describe(self) -> str:
        parts = []
        if self.max_train_steps is not None:
            parts.append(f"{self.spent_train_steps} of {self.max_train_steps} GRPO training steps spent "
                         f"({self.train_steps_left} left)")
        parts.append(f"{self.spent_stages} of {self.max_stages} stages" if self.max_stages is not None
                     else f"{self.spent_stages} stages")
        if (left := self.seconds_left) is not None:
            parts.append(f"{left:.0f}s of wall time left")
        return ", ".join(parts)
