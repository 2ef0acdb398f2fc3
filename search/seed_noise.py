"""How far apart two scores must be before they mean anything: the evaluation's noise,
and the training seed's.

A template may declare the seed-to-seed spread of one stage (``[noise] stage_sd``,
measured by ``benchmarks/stage_spread.py``). Where it declares none, the spread is
measured by repetition: a stage trained again from the same start, with the same values
and ``train.py`` and another seed (``Node.repeat_of``). A pair of repeats scored
``a`` and ``b`` on the same validation items gives ``(a − b)² / 2`` as an estimate of the
variance, with one degree of freedom; pairs from this session and from earlier sessions
on the same template (memory) are pooled, with the evaluation's standard error counted as
one more pair (one repeat that lands on its twin's score would otherwise claim no spread
at all, and every later verdict would be too sure). Verdicts drawn after an estimate exists count
it; the prompt says how it was obtained and how rough it is.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from search.tree import Tree

MAX_LABELS = 4  # repeats named in one line (the estimate pools them all)
PRIOR_PAIRS = 1  # the evaluation's standard error weighs as much as one repeat in the estimate


@dataclass(frozen=True)
class Repeat:
    """Two stages that differ only by their training seed, and their validation scores."""

    original: str
    repeat: str
    scores: tuple[float, float]
    session: str = ""  # "" for this session; an earlier session's name when memory brought it

    def label(self) -> str:
        where = f" in {self.session}" if self.session else ""
        return f"{self.repeat} repeats {self.original}{where}: {self.scores[1]:.3f} vs {self.scores[0]:.3f}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Repeat":
        return cls(data["original"], data["repeat"], tuple(data["scores"]), data.get("session", ""))


def repeats_in(tree: Tree, session: str = "") -> list[Repeat]:
    """Every scored repeat of a scored stage in ``tree``."""
    found = []
    for node in tree.nodes.values():
        original = tree.nodes.get(node.repeat_of) if node.repeat_of else None
        if node.scored and original is not None and original.scored:
            found.append(Repeat(original.id, node.id, (original.val_score, node.val_score), session))
    return found


def shrunk_sd(repeats: list[Repeat], prior_sd: float | None) -> float:
    """The pooled estimate, shrunk toward ``prior_sd`` (the evaluation's standard error: the
    spread expected before any repeat) as if it were one more pair, so one repeat that
    lands on its twin's score does not claim a spread of 0 (None: no shrinking).

    >>> round(shrunk_sd([Repeat("n1", "n2", (0.50, 0.50))], prior_sd=0.016), 4)
    0.0113
    """
    if prior_sd is None:
        return pooled_sd(repeats)
    squares = sum((a - b) ** 2 / 2 for a, b in (r.scores for r in repeats))
    return math.sqrt((PRIOR_PAIRS * prior_sd ** 2 + squares) / (PRIOR_PAIRS + len(repeats)))


def pooled_sd(repeats: list[Repeat]) -> float:
    """The seed-to-seed standard deviation the pairs estimate, pooled (one degree of freedom each).

    >>> round(pooled_sd([Repeat("n1", "n2", (0.60, 0.62)), Repeat("n3", "n4", (0.70, 0.70))]), 4)
    0.01
    """
    return math.sqrt(sum((a - b) ** 2 for a, b in (r.scores for r in repeats)) / (2 * len(repeats)))


@dataclass
class Noise:
    """The seed-to-seed spread of one stage: the template's (``stage_sd``), else estimated
    from repeats (``earlier`` ones from memory, and this session's own). ``probing`` says
    this session will run a repeat to measure it."""

    stage_sd: float | None = None
    source: str = ""
    earlier: list[Repeat] = field(default_factory=list)
    probing: bool = False

    def repeats(self, tree: Tree) -> list[Repeat]:
        return [*self.earlier, *repeats_in(tree)]

    def sd(self, tree: Tree) -> float | None:
        """The spread verdicts count now (None: neither declared nor measured yet)."""
        if self.stage_sd is not None:
            return self.stage_sd
        repeats = self.repeats(tree)
        return shrunk_sd(repeats, tree.base_stderr) if repeats else None

    def summary(self, tree: Tree) -> str:
        """One line for `show`, the report and the first screen."""
        if self.stage_sd is not None:
            return f"sd {self.stage_sd:.3f} of a stage, declared by the template ({self.source})"
        repeats = self.repeats(tree)
        if repeats:
            return (f"sd {self.sd(tree):.3f} of a stage, estimated from {_count(repeats)} ({_labels(repeats)})"
                    + _shrink_note(tree))
        if self.probing:
            return "not measured yet: a noise probe will train the first stage again with another seed"
        return "not measured: the template declares none and no stage was repeated"

    def text(self, tree: Tree) -> str:
        """The prompt's noise section, as known when the session started (the prompt's
        unchanging part: an estimate measured later is shown after the sibling pairs)."""
        se = tree.base_stderr or 0.0  # the base model's: known from the start, so this text never changes
        lines = [f"- Evaluation: a validation score's standard error is about {se:.3f} (binomial, "
                 "from the evaluator); a paired comparison of a child with its parent on the same items is "
                 "tighter."]
        sd = self.stage_sd if self.stage_sd is not None else (
            shrunk_sd(self.earlier, tree.base_stderr) if self.earlier else None)
        if self.stage_sd is not None:
            lines.append(f"- Training randomness: the same stage with another seed scores with a spread of sd "
                         f"{self.stage_sd:.3f} ({self.source}). Two stages that differ by less than about "
                         f"{2 * max(self.stage_sd, se):.3f} are not distinguishable from one run each.")
        elif self.earlier:
            lines.append(f"- Training randomness: the template declares none; earlier sessions on it repeated "
                         f"stages with another seed ({_labels(self.earlier)}), which "
                         f"estimates sd {sd:.3f} ({_dof(self.earlier)}{_shrink_note(tree)}). Two stages that "
                         f"differ by less than about {2 * max(sd, se):.3f} are not distinguishable from one run each.")
        else:
            lines.append("- Training randomness: not measured for this template; expect the seed-to-seed spread "
                         "of a stage to be at least the evaluation's standard error."
                         + (" This session repeats its first stage from the base model with another seed to "
                            "measure it; once the repeat is scored, the estimate is shown after the sibling pairs, and "
                            "verdicts drawn after it count it." if self.probing else ""))
        spread = f"² + {sd:.3f}²" if sd else "² + stage sd²" if self.probing else "²"
        lines.append(f"- A paired verdict against the parent says better or worse only beyond "
                     f"2 × √(paired SE{spread}); below that it says tie, so a tie of +2 paired SE is a lead the "
                     "seed noise can explain, not nothing.")
        return "\n".join(lines)

    def measured_text(self, tree: Tree) -> str:
        """The prompt's line on this session's own repeats ("" when it has none, or the
        template declares the spread)."""
        own = repeats_in(tree)
        if self.stage_sd is not None or not own:
            return ""
        repeats = self.repeats(tree)
        return (f"\n\nSeed noise measured by repetition: {_labels(repeats)} → stage sd ≈ "
                f"{self.sd(tree):.3f} ({_dof(repeats)}{_shrink_note(tree)}: a rough estimate, one repeat can land "
                "close or far by chance). Verdicts drawn since count it.")


def _labels(repeats: list[Repeat], shown: int = MAX_LABELS) -> str:
    """The newest pairs by name (a line stays short however many a store holds)."""
    more = f"; and {len(repeats) - shown} earlier" if len(repeats) > shown else ""
    return "; ".join(r.label() for r in repeats[-shown:]) + more


def _shrink_note(tree: Tree) -> str:
    if tree.base_stderr is None:
        return ""
    return f", shrunk toward the evaluation's standard error {tree.base_stderr:.3f} as if it were one more pair"


def _count(repeats: list[Repeat]) -> str:
    return f"{len(repeats)} repeated stage{'s' * (len(repeats) > 1)}"


def _dof(repeats: list[Repeat]) -> str:
    return f"{len(repeats)} degree{'s' * (len(repeats) > 1)} of freedom"
