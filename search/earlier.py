"""What earlier sessions on the same template measured: memory across sessions.

A session starts from what the earlier sessions in its store measured on the same task
(the same frozen files and search space), whichever strategy ran them. Every strategy
gets the same memory, in the form it reads:

- the LLM, a section of its prompt (``memory_text``): the sessions and their winners, the
  best schedules, the stages that gained and lost most against their parents (paired,
  with their noise), what each depth gained, which knobs went with the gain, the
  train.py edits with what they measured, and the collapses. Every line names its session
  and node.
- Optuna's TPE, the same stages as finished trials (``memory_trials``), so the tree
  search's first proposals are not random when earlier stages say where to look.

Nothing here reads a store: the application hands over each earlier session's tree
(``EarlierSession``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from optuna.trial import TrialState, create_trial

from search.context import diff_summary
from search.importance import fits
from search.mattered import mattered_text
from search.memory import collapsed
from search.space import SearchSpace
from search.tree import Node, Tree, schedule_text

MOST = 6  # stages listed among the largest gains, and among the largest losses
BEST_SCHEDULES = 3
MEMORY_ATTR = "memory"  # a warm-start trial's user attribute: "session/node"


@dataclass
class EarlierSession:
    """One earlier session on the same template, as its records hold it."""

    name: str
    strategy: str
    tree: Tree
    test_score: float | None = None  # its winner's, when it finished
    test_stderr: float | None = None
    diffs: dict[str, str] = field(default_factory=dict)  # node id -> its train.py diff, for edited nodes
    seed: int | None = None  # its --seed: a stage's training seed follows from it and the node's number

    @property
    def stages(self) -> int:
        return len(self.tree.scored())


def label(session: EarlierSession, node: Node) -> str:
    return f"{session.name}/{node.id}"


def delta_of(session: EarlierSession, node: Node) -> tuple[float, float] | None:
    """A stage's validation gain over its parent and its noise: the paired comparison when
    there is one, else the difference of the two scores with their errors combined."""
    if node.comparison is not None:
        return node.comparison.delta, node.comparison.stderr
    parent = session.tree.score_of(node.parent)
    if not node.scored or parent is None:
        return None
    return node.val_score - parent, math.hypot(node.val_stderr or 0.0, session.tree.stderr_of(node.parent) or 0.0)


def values_changed(session: EarlierSession, node: Node) -> str:
    """A first stage's values; a later one's, only those it changed from its parent's."""
    if node.parent is None:
        return schedule_text(node.hyperparameters)
    before = session.tree.nodes[node.parent].hyperparameters
    changed = {k: v for k, v in node.hyperparameters.items() if before.get(k) != v}
    if not changed:
        return "the parent's values"
    text = "changed " + ", ".join(f"{k} {readable(before.get(k))} -> {readable(v)}" for k, v in changed.items())
    if len(changed) > 2:
        text += f" ({len(changed)} values changed at once: the stage cannot credit one of them)"
    return text


def readable(value) -> str:
    """A value to read, not to copy back (the best schedules give them whole): three figures."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def stage_line(session: EarlierSession, node: Node) -> str:
    delta, noise = delta_of(session, node)
    verdict = f", {node.comparison.verdict}" if node.comparison else ""
    return (f"- {label(session, node)} (stage {node.depth}, from {node.parent or 'base'}): "
            f"{values_changed(session, node)}{' [edited train.py]' * node.edited} -> validation "
            f"{node.val_score:.3f}, {delta:+.3f} ± {noise:.3f} against its parent{verdict}")


def sessions_text(sessions: list[EarlierSession], seed: int | None = None) -> str:
    lines = []
    for s in sessions:
        same = ", the same --seed as this session" if seed is not None and s.seed == seed else ""
        best = s.tree.best()
        won = (f"best validation {best.val_score:.3f} ± {best.val_stderr or 0:.3f} at {label(s, best)} "
               f"(stage {best.depth})" if best else "no stage scored")
        test = f", test {s.test_score:.3f} ± {s.test_stderr or 0:.3f}" if s.test_score is not None else ""
        base = f"base {s.tree.base_score:.3f}; " if s.tree.base_score is not None else ""
        steps = sum(n.steps or 0 for n in s.tree.nodes.values())
        spent = f", {steps} training steps in all" if steps else ""
        lines.append(f"- {s.name} ({s.strategy}, {s.stages} stages scored{spent}{same}): {base}{won}{test}")
    return "\n".join(lines)


def best_schedules_text(sessions: list[EarlierSession]) -> str:
    ranked = sorted(((n.val_score, s, n) for s in sessions for n in s.tree.scored()), key=lambda t: -t[0])
    lines = []
    for score, s, node in ranked[:BEST_SCHEDULES]:
        path = " -> ".join(schedule_text(n.hyperparameters) + (" [edit]" if n.edited else "")
                           for n in s.tree.path(node.id))
        lines.append(f"- {label(s, node)}, validation {score:.3f} ± {node.val_stderr or 0:.3f}: {path}")
    return "\n".join(lines)


def moves_text(sessions: list[EarlierSession]) -> str:
    measured = [(d[0], s, n) for s in sessions for n in s.tree.scored() if (d := delta_of(s, n)) is not None]
    if not measured:
        return "(no stage was scored against a scored parent)"
    measured.sort(key=lambda t: -t[0])
    gained = [stage_line(s, n) for delta, s, n in measured[:MOST] if delta > 0]
    lost = [stage_line(s, n) for delta, s, n in reversed(measured[-MOST:]) if delta < 0]
    return ("Largest gains:\n" + ("\n".join(gained) or "(none)") + "\n\nLargest losses:\n"
            + ("\n".join(lost) or "(none)"))


def edits_text(sessions: list[EarlierSession]) -> str:
    lines = []
    for s in sessions:
        for node in s.tree.nodes.values():
            if not node.edited:
                continue
            diff = s.diffs.get(node.id, "")
            what = diff_summary(diff) if diff else "train.py edited"
            measured = delta_of(s, node)
            worth = (f"{measured[0]:+.3f} ± {measured[1]:.3f} against its parent" if measured
                     else f"not scored ({node.status.value}{': ' + node.reason if node.reason else ''})")
            lines.append(f"- {label(s, node)} ({what}): {worth}")
    return "\n".join(lines) or "(no earlier stage edited train.py)"


def collapses_text(sessions: list[EarlierSession]) -> str:
    lines = [f"- {label(s, n)}: {values_changed(s, n)} -> "
             + (f"validation {n.val_score:.3f} from {s.tree.score_of(n.parent):.3f}" if n.scored
                else ", ".join(f.name for f in n.diagnosis) or n.status.value)
             for s in sessions for n in s.tree.nodes.values() if collapsed(s.tree, n)]
    return "\n".join(lines) or "(none)"


def forest(sessions: list[EarlierSession]) -> Tree:
    """Every earlier stage in one tree (ids prefixed by their session), for the estimates
    that want many stages: gain by depth, which knobs went with the gain."""
    bases = [s.tree.base_score for s in sessions if s.tree.base_score is not None]
    merged = Tree(base_score=sum(bases) / len(bases) if bases else None)
    for s in sessions:
        for node in s.tree.nodes.values():
            copy = Node.from_dict({**node.to_dict(), "id": label(s, node),
                                   "parent": f"{s.name}/{node.parent}" if node.parent else None})
            merged.add(copy)
    return merged


def memory_text(sessions: list[EarlierSession], space: SearchSpace, seed: int | None = None) -> str:
    """The prompt's section on earlier sessions (empty when there are none). ``seed``: this
    session's --seed, so that a session with the same one is named as such."""
    if not sessions:
        return ""
    stages = sum(s.stages for s in sessions)
    same = [s.name for s in sessions if seed is not None and s.seed == seed]
    seeds = ("They ran other seeds: a difference within about twice its noise is not a finding." if not same else
             f"{', '.join(same)} ran with this session's --seed: its stage nK trained with the seed this session's nK "
             "gets, so the same values from the same parent and train.py reproduce its score exactly (one draw of the "
             "noise, not a new one). The others ran other seeds: a difference within about twice its noise is not a "
             "finding.")
    return "\n\n".join([
        f"{len(sessions)} earlier session{'s' * (len(sessions) > 1)} on this template ({stages} scored stages), "
        "from the records in this store. Each line names its session and node; a gain is against the stage's own "
        f"parent, ± its noise (paired on the same validation items where both were scored). {seeds}",
        "## Sessions\n\n" + sessions_text(sessions, seed),
        "## Best schedules so far (stage by stage)\n\n" + best_schedules_text(sessions),
        "## Stages against their parents\n\n" + moves_text(sessions),
        "## What went with the gain (all earlier stages together)\n\n" + mattered_text(forest(sessions), space).strip(),
        "## train.py edits and what they measured\n\n" + edits_text(sessions),
        "## Collapses\n\n" + collapses_text(sessions),
    ])


def memory_trials(sessions: list[EarlierSession], space: SearchSpace) -> list[dict]:
    """Each earlier scored stage as TPE is told the session's own stages (its values over the
    space; its validation gain over its parent), to warm-start the study (``warm_start``)."""
    trials = []
    for s in sessions:
        for node in s.tree.scored():
            parent = s.tree.score_of(node.parent)
            if parent is None or not all(fits(space, name, node.hyperparameters) for name in space.params):
                continue
            trials.append({"label": label(s, node), "parent": node.parent or "base", "value": node.val_score - parent,
                           "params": {name: node.hyperparameters[name] for name in space.params}})
    return trials


def warm_start(study, trials: list[dict], space: SearchSpace) -> int:
    """Add the earlier stages (``memory_trials``) the study does not hold yet as finished
    trials: a kill midway adds the rest on resume, never one twice. How many it holds."""
    held = {t.user_attrs.get(MEMORY_ATTR) for t in study.get_trials(deepcopy=False)}
    for trial in trials:
        if trial["label"] in held or not all(fits(space, name, trial["params"]) for name in space.params):
            continue
        study.add_trial(create_trial(params=trial["params"], distributions=space.distributions(),
                                     value=trial["value"], state=TrialState.COMPLETE,
                                     user_attrs={MEMORY_ATTR: trial["label"], "parent": trial["parent"]}))
    return sum(1 for t in study.get_trials(deepcopy=False) if MEMORY_ATTR in t.user_attrs)
