"""What the LLM sees: everything a researcher would look at before choosing the next stage.

The prompt is built in two parts, in this order, so that a provider's prompt cache
(an identical prefix) applies to every request of a session:

1. what never changes in a session: the rules, the reply task (with ``hybrid``, what
   Optuna's TPE does with the ranges, near-uniform draws during its start-up included),
   the research brief, the search space, what a stage trains on (the training-set size,
   the TRL version) and what its curves measure (at the stage's own temperature), how
   noisy a score is, and the template's ``train.py``;
2. what changes with every stage: the budget left, the depth limit and the nodes at it,
   which node is scored on test at the end (the best by validation) and, with
   ``hybrid``, whether TPE is still in its start-up; the tree (one line a node, an edited
   node with a summary of its diff), the stages in flight (proposed, not scored yet: never
   dropped, so a proposal does not repeat one blindly), what has mattered (fANOVA from
   ``MIN_STAGES`` scored stages, a rough early estimate before: ``search/mattered.py``), children
   of one parent paired on the same items (``search/siblings.py``), the tree
   policy's pick with the reason for it, and a block for the pick, the best node and the
   nodes on its path (marked when they can no longer be extended) and the next best
   nodes (path, exact values, validation ± SE, the paired comparison with its parent,
   diagnosis findings with evidence, curve summary, the diff of its ``train.py``), recent
   failures, what became of requests that timed out (a late reply is discarded; what was
   proposed instead), and feedback on the last proposal.

Prompts are files in ``search/prompts/``; this module fills them in and keeps the user
message within a token budget (about 4 characters a token), dropping the least useful
parts first: the curves of lower-ranked blocks (the pick's, the best node's and its
path's go last), sibling pairs, then blocks, then tree lines and failures, then the
middle of long diffs and of ``train.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from string import Template as Text
from typing import Callable

from search.edit_evidence import edits_text
from search.mattered import mattered_text
from search.memory import RELATIVE_DROP, learning_rate_limit
from search.novelty import TOLERANCE, repeat_band
from search.policy import BestFirstPolicy
from search.seed_noise import Noise
from search.siblings import MAX_PAIRS, sibling_pairs, siblings_text
from search.space import SearchSpace
from search.study import N_STARTUP_TRIALS
from search.tree import (
    Comparison,
    Finding,
    Node,
    Status,
    Tree,
    depth_ceiling,
    findings_text,
    may_extend,
    verdict_at,
    verdict_margin,
)

PROMPTS = Path(__file__).with_name("prompts")
CHARS_PER_TOKEN = 4
MAX_DIFF_CHARS = 2500
STATIC_END = "<!-- everything above is the same in every request of this session -->"
IN_FLIGHT = (Status.PENDING, Status.RUNNING, Status.INTERRUPTED)  # proposed, not ended: no score yet


def prompt(name: str, **values) -> str:
    return Text((PROMPTS / f"{name}.md").read_text()).safe_substitute(**values)


def exact(value) -> str:
    """A value as the LLM must write it back: no rounding (0.96 is not 'T=1')."""
    return repr(value) if isinstance(value, float) else str(value)


def values_text(hyperparameters: dict) -> str:
    return ", ".join(f"{name}={exact(value)}" for name, value in hyperparameters.items())


def space_text(space: SearchSpace) -> str:
    lines = []
    for p in space.params.values():
        domain = (f"one of {p.choices}" if p.type == "categorical"
                  else f"{p.type} in [{p.low:g}, {p.high:g}]" + (" (log scale)" if p.log else "")
                  + f"; near-repeat band {repeat_band(p)}")
        lines.append(f"- `{p.name}`: {domain}; default {p.default!r}. {p.help}")
    return "\n".join(lines)


def memory_section(memory: str) -> str:
    """The prompt's section on earlier sessions, right after the brief (empty without one)."""
    return f"\n\n# What earlier sessions on this template measured\n\n{memory.strip()}" if memory.strip() else ""


def diff_summary(diff: str) -> str:
    """One line for a unified diff: lines added and removed, and the first change."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    first = next((line for line in added if line), next((line for line in removed if line), ""))
    return f"+{len(added)}/-{len(removed)} lines, e.g. `{first[:80]}`"


def facts_text(space: SearchSpace, train_size: int | None, completions_per_step: int | None,
               trl_version: str | None, edit_options: str = "") -> str:
    """What a stage trains on and what its curves measure: the same in every request of a session."""
    lines = []
    if train_size is not None:
        line = (f"- Training data: each stage's train.py gets {train_size:,} training prompts (the template's "
                "`train_size`, frozen in env/constants.toml).")
        steps, group = space.named("steps"), space.named("group_size")
        if completions_per_step and steps and group:
            line += (f" A stage of `{steps}` steps with `{group}` completions per prompt uses {steps} × "
                     f"{completions_per_step} / {group} of them ({completions_per_step} completions a step).")
        lines.append(line)
    if trl_version:
        lines.append(f"- TRL {trl_version} is installed: an edit of train.py may use only the GRPOConfig and "
                     "GRPOTrainer arguments that this version has.")
    if edit_options:
        lines.append("- Trainer options train.py leaves at their defaults (as installed; an edit sets one by passing "
                     "it where train.py builds its GRPOConfig). Each stage is one training run, so a schedule set "
                     "here restarts in every stage:\n" + edit_options)
    lines.append("- Each stage is a new training run on its parent's weights: the optimizer's state (e.g. AdamW's "
                 "moments) and the learning-rate schedule (its warmup and decay) start afresh in every stage; only "
                 "the weights carry over.")
    lines.append("- Every stage trains with a seed of its own (data order and sampling), so two stages with the same "
                 "values still differ by the training noise below.")
    temperature = space.named("temperature")
    rollouts = f"sampled at the stage's own `{temperature}`" if temperature else "sampled as the stage samples"
    lines.append(f"- A stage's curves (reward, reward_std, entropy, completion lengths, zero-variance groups) are "
                 f"measured on its own rollouts, {rollouts}: the same policy usually shows a lower reward and a higher "
                 "entropy at a higher temperature, so compare curves across stages only at equal temperatures. "
                 "The validation score does not depend on it (the frozen evaluator decodes the same way for every "
                 "node).")
    return "\n".join(lines)


@dataclass
class PromptView:
    """What the proposer knows when it asks: the tree policy's pick (None: the base model),
    the nodes that may be extended, the budget, the feedback to pass on, and what came of
    its requests that timed out (one sentence each)."""

    suggested: str | None
    expandable: list[str | None]
    budget: str
    feedback: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)


class ContextBuilder:
    """Fills the prompts. The application hands it what the search may not open itself:
    ``curves`` gives a stage's curve summary by node id, ``diff`` the unified diff of a
    commit's ``train.py`` against the template's."""

    def __init__(self, program: str, topic: str, space: SearchSpace, curves: Callable[[str], str],
                 max_tokens: int = 6000, train_py: str = "", diff: Callable[[str], str] = lambda commit: "",
                 noise: Noise | None = None, max_depth: int = 3, hybrid: bool = False,
                 train_size: int | None = None, completions_per_step: int | None = None,
                 trl_version: str | None = None, policy: BestFirstPolicy | None = None, edit_options: str = "",
                 memory: str = "", pair: Callable[[str, str], Comparison | None] = lambda a, b: None):
        self.program = program
        self.topic = topic
        self.space = space
        self.curves = curves
        self.max_tokens = max_tokens
        self.train_py = train_py
        self.diff = diff
        self.noise = noise or Noise()
        self.max_depth = max_depth
        self.hybrid = hybrid
        self.train_size = train_size
        self.completions_per_step = completions_per_step
        self.trl_version = trl_version  # read by the application (search/ never imports trl)
        self.edit_options = edit_options  # the same: autorl/trainer_options.py
        self.policy = policy or BestFirstPolicy(max_depth)  # to say why the tree policy picked what it did
        self.memory = memory  # what earlier sessions on this template measured (search/earlier.py), or ""
        self.pair = pair  # a sibling minus another on the validation items (the application reads them)

    # -- the part that never changes ------------------------------------------------------------

    def system(self) -> str:
        return prompt("system", tolerance=f"{TOLERANCE:.0%}", max_depth=self.max_depth,
                      ceiling=depth_ceiling(self.max_depth)).strip()

    def static(self, tree: Tree, train_py: str | None = None) -> str:
        return prompt(
            "static", task=prompt("task_hybrid" if self.hybrid else "task_llm", startup=N_STARTUP_TRIALS).strip(),
            program=self.program.strip(), topic=self.topic, space=space_text(self.space),
            memory=memory_section(self.memory),
            facts=facts_text(self.space, self.train_size, self.completions_per_step, self.trl_version,
                             self.edit_options),
            noise=self.noise.text(tree), train_py=self.train_py if train_py is None else train_py,
        ).strip() + "\n\n" + STATIC_END

    # -- the part that changes with every stage ------------------------------------------------

    def edit_note(self, node: Node) -> str:
        if not node.edited:
            return ""
        diff = self.diff(node.commit)
        return f" [edited train.py: {diff_summary(diff)}]" if diff else " [edited train.py]"

    def same_script(self, a: Node, b: Node) -> bool:
        """Whether two nodes ran the same train.py: one commit, or two edits with one diff."""
        return a.commit == b.commit or (a.edited and b.edited and self.diff(a.commit) == self.diff(b.commit))

    def script_of(self, node: Node) -> str:
        """A sibling's train.py in one phrase: which edit, not only that there was one."""
        return self.edit_summary(node).replace("edited train.py", "edited", 1) if node.edited else "the parent's"

    def edit_summary(self, node: Node) -> str:
        diff = self.diff(node.commit) if node.commit else ""
        return f"edited train.py ({diff_summary(diff)})" if diff else "edited train.py"

    def node_line(self, tree: Tree, node: Node) -> str:
        if node.scored:
            score = f"val {node.val_score:.3f} ± {node.val_stderr:.3f}"
            if node.comparison:
                c = node.comparison
                score += f" ({c.delta:+.3f} ± {c.stderr:.3f} paired vs parent: {c.verdict}{self.beyond(tree, c)})"
            score += "".join(f", {key} {value:.3g}" for key, value in node.eval_metrics.items())
        else:
            score = node.status.value + (f" ({node.reason[:120]})" if node.reason else "")
        flags = [f.name for f in node.diagnosis if f.severity != "info"]
        at_limit = self.limit_note(node)
        return (f"- {node.id} ← {node.parent or 'base'} (stage {node.depth}): {score}; "
                f"{values_text(node.hyperparameters)}"
                f"{self.edit_note(node)}{at_limit}" + (f"; findings: {', '.join(flags)}" if flags else ""))

    def tree_text(self, tree: Tree, lines: int, failures: int) -> str:
        if not tree.nodes:
            return "No stage has run yet."
        ranked = sorted(tree.scored(), key=lambda n: n.val_score, reverse=True)
        out = [self.node_line(tree, n) for n in ranked[:lines]]
        if len(ranked) > lines:
            out.append(f"- … {len(ranked) - lines} lower-scoring nodes omitted")
        unscored = [n for n in tree.nodes.values() if not n.scored and n.status not in IN_FLIGHT]
        for node in unscored[-failures:] if failures else []:
            out.append(self.node_line(tree, node))
        flying = sum(n.status in IN_FLIGHT for n in tree.nodes.values())
        out.append(f"({len(tree.nodes)} nodes in all, {len(ranked)} scored"
                   + (f", {flying} in flight" if flying else "") + ")")
        return "\n".join(out)

    def in_flight_text(self, tree: Tree) -> str:
        """The stages proposed and not ended (training, waiting for a slot, or cut short and to run
        again), with who proposed each and why: all of them, whatever the prompt's length."""
        flying = [n for n in tree.nodes.values() if n.status in IN_FLIGHT]
        if not flying:
            return ""
        lines = [self.node_line(tree, n) + (f"; proposed because: {_clip_words(n.rationale, RATIONALE_CHARS // 2)}"
                                            if n.rationale else "") for n in flying]
        return ("\n\n# Stages in flight (proposed, not scored yet)\n\nTheir scores are not known yet; a proposal "
                "that nearly repeats one of them from the same parent is not run.\n" + "\n".join(lines))

    def beyond(self, tree: Tree, comparison: Comparison) -> str:
        """The margin this comparison's verdict was drawn at, so a tie reads as near or far
        (a record from before comparisons kept their spread: the spread known now)."""
        now = self.noise.sd(tree) or 0.0
        drawn = comparison.stage_sd if comparison.stage_sd is not None else now
        text = f", beyond ±{verdict_margin(comparison.stderr, drawn):.3f}"
        if abs(drawn - now) > 1e-9:  # drawn before the seed spread was measured, or before a later repeat
            before = "with an earlier estimate of the seed spread" if drawn else "before the seed spread was measured"
            margin = verdict_margin(comparison.stderr, now)
            counted = verdict_at(comparison.delta, margin)
            text += f"; that verdict was drawn {before}: counted now, beyond ±{margin:.3f}, it reads {counted}"
        return text

    def limit_note(self, node: Node) -> str:
        if node.depth < self.max_depth:
            return ""
        return " [at or past the depth limit, not worse than its parent]" if self.extendable(node) \
            else " [at depth limit]"

    def depth_text(self, tree: Tree) -> str:
        """The limit, and the nodes at or past it that may still be extended (the tree marks the rest)."""
        limit = self.max_depth
        text = (f"Depth: a path holds up to {depth_ceiling(limit)} stages; a node at stage {limit} or deeper (the "
                "depth limit) may be extended only while its stage scored 'better' than its parent or tied it "
                "(paired), not 'worse'.")
        going_on = [n.id for n in tree.scored() if n.depth >= limit and self.extendable(n)]
        return text + (f" At or past the limit and not worse (may be extended): {', '.join(going_on)}."
                       if going_on else "")

    def unextendable_reason(self, node: Node) -> str:
        if node.depth >= depth_ceiling(self.max_depth):
            return "at the deepest stage a path may reach: cannot be extended"
        if node.depth >= self.max_depth and not self.extendable(node):
            why = "worse than its parent" if node.comparison is not None else "no paired verdict against its parent"
            return f"at or past the depth limit, {why}: cannot be extended"
        return "cannot be extended"

    def extendable(self, node: Node) -> bool:
        """The depth rule this proposer works under: past the limit, a tie goes on (it weighs ties itself)."""
        return may_extend(node, self.max_depth, keep_on_tie=True)

    def limit_text(self, tree: Tree) -> str:
        """The learning rates the session refuses after a collapse, said before a proposal needs it."""
        if self.space.named("learning_rate") is None:
            return ""
        limit = learning_rate_limit(tree, self.space)
        if limit is None:
            return (f"\nLearning-rate limit: none yet (a stage that scores {RELATIVE_DROP:.0%} or more below its "
                    "parent is a collapse, and sets one below its learning rate).")

        return f"\nLearning-rate limit: {limit.evidence}; a proposal at or above {limit.value:.3g} is sent back."

    def winner_text(self, tree: Tree) -> str:
        """Which node the session's result is: the best by validation, scored once on test at the end."""
        rule = ("At the end, the node with the best validation score (ties: the earlier one) is scored once on the "
                "test split, and that is the session's result; the last stages are scored on validation like every "
                "other, so one whose score you never see can still be the result")
        best = tree.best()
        if best is None:
            return rule + "; no node is scored yet."
        limit = ", at the depth limit" if not self.extendable(best) else ""
        return rule + f". Now: {best.id} ({best.val_score:.3f} ± {best.val_stderr:.3f}{limit})."

    def tpe_text(self, tree: Tree) -> str:
        """With ``hybrid``: whether TPE's next draw is still its start-up's uniform one."""
        if not self.hybrid:
            return ""
        scored = len(tree.scored())
        if scored < N_STARTUP_TRIALS:
            return (f"\nOptuna's TPE has {scored} scored stage{'s' * (scored != 1)} to learn from: until "
                    f"{N_STARTUP_TRIALS} are scored it draws uniformly inside your ranges (its start-up).")
        return (f"\nOptuna's TPE learns from {scored} scored stages (past its start-up of {N_STARTUP_TRIALS}); "
                "with this few it still draws widely inside your ranges.")

    def detailed(self, tree: Tree, view: PromptView) -> list[str]:
        """The nodes shown in a block, most useful first: the tree policy's pick, the best node,
        the newest scored stage (what just happened), the nodes on the best path (nearest first),
        then every other scored node by score, whether it can be extended or not (a block says which)."""
        order: list[str] = [view.suggested] if view.suggested is not None else []
        best = tree.best()
        if best is not None:
            order += [best.id, *newest(tree)] + [n.id for n in reversed(tree.path(best.id))]
        order += [n.id for n in sorted(tree.scored(), key=lambda n: n.val_score, reverse=True)]
        return list(dict.fromkeys(order))

    @staticmethod
    def curve_order(tree: Tree, shown: list[str]) -> list[str]:
        """Whose curves stay when the prompt must shrink: the best node's first (why did the
        best path stall, or is it still rising?), the newest stage's (a stage whose curves were
        never shown is the evidence a proposal lacks most), then the blocks in their order."""
        best = tree.best()
        first = ([best.id] if best is not None else []) + newest(tree)
        return list(dict.fromkeys([node_id for node_id in first if node_id in shown] + shown))

    def roles(self, tree: Tree, node_id: str | None, view: PromptView) -> list[str]:
        roles = ["the tree policy's pick"] if node_id == view.suggested else []
        if node_id is None:
            return roles
        best = tree.best()
        if best is not None and node_id == best.id:
            roles.append("best validation so far")
        elif best is not None and node_id in {n.id for n in tree.path(best.id)}:
            roles.append("on the best path")
        if node_id not in view.expandable:
            node = tree.nodes[node_id]
            roles.append(self.unextendable_reason(node))
        return roles

    @staticmethod
    def everywhere(tree: Tree) -> dict[str, Finding]:
        """The information-only findings every scored stage shows (two or more), by name, each
        with the best node's instance: said once above the blocks, not in every one."""
        scored = sorted(tree.scored(), key=lambda n: n.val_score, reverse=True)
        if len(scored) < 2:
            return {}
        names = set.intersection(*({f.name for f in n.diagnosis if f.severity == "info"} for n in scored))
        return {f.name: f for f in scored[0].diagnosis if f.name in names}

    @staticmethod
    def everywhere_text(tree: Tree, shared: dict[str, Finding]) -> str:
        if not shared:
            return ""
        best = max(tree.scored(), key=lambda n: n.val_score)
        lines = [f"- {f.name} ({f.severity}) on all {len(tree.scored())} scored stages; at {best.id}: {f.evidence}; "
                 f"try: {f.suggestion}" for f in shared.values()]
        return "Every scored stage shows (not repeated in the blocks below):\n" + "\n".join(lines) + "\n\n"

    def candidate_block(self, tree: Tree, node_id: str | None, view: PromptView, curves: bool,
                        shared: dict[str, Finding] | None = None) -> str:
        roles = self.roles(tree, node_id, view)
        heading = (" — " + "; ".join(roles)) if roles else ""
        if node_id is None:
            base = "unknown" if tree.base_score is None else f"{tree.base_score:.3f} ± {tree.base_stderr:.3f}"
            return (f"## base{heading}\n- the base model: validation {base}; "
                    f"{len(tree.children(None))} first stages started from it; train.py: the template's")
        node = tree.nodes[node_id]
        path = " → ".join(["base", *(n.id for n in tree.path(node_id))])
        stages = f"stage {node.depth} of at most {depth_ceiling(self.max_depth)}"
        lines = [f"## {node_id}{heading}", f"- path: {path} ({stages})",
                 f"- values: {values_text(node.hyperparameters)}",
                 f"- validation: {node.val_score:.3f} ± {node.val_stderr:.3f}; {node.steps} GRPO steps"
                 + (f"; weights moved {node.weight_drift:.2%} from the stage's start (relative L2)"
                    if node.weight_drift is not None else "")]
        if node.comparison:
            c = node.comparison
            lines.append(f"- against its parent (paired, same {c.n} items): "
                         f"{c.delta:+.3f} ± {c.stderr:.3f} → {c.verdict}{self.beyond(tree, c)}")
        if node.rationale:
            lines.append(f"- why it was proposed: {_clip_words(node.rationale, RATIONALE_CHARS)}")
        own = [f for f in node.diagnosis if f.name not in (shared or {})]
        lines.append("- diagnosis:\n" + _indent(findings_text(own) if own or not node.diagnosis else
                                                 "nothing beyond what every stage shows"))
        if curves:
            temperature = self.space.named("temperature")
            value = node.hyperparameters.get(temperature) if temperature else None
            written = f"{value:.3g}" if isinstance(value, float) else exact(value)
            sampled = f" (rollouts at {temperature} {written})" if value is not None else ""
            lines.append(f"- curves of its stage{sampled}:\n" + _indent(self.curves(node_id)))
        diff = self.diff(node.commit).strip() if node.commit else ""
        lines.append("- train.py: the template's" if not diff else
                     f"- train.py: the template's with this diff (commit {node.commit[:10]}):\n```diff\n"
                     f"{_clip(diff, MAX_DIFF_CHARS)}\n```")
        return "\n".join(lines)

    def pick_text(self, tree: Tree, view: PromptView) -> str:
        reason = self.policy.reason(tree, view.suggested)
        return (f"The tree policy picks **{view.suggested or 'base'}**: {reason}. It is a rule of thumb, not a "
                "verdict; you may choose any expandable node.")

    def sibling_lines(self, tree: Tree) -> tuple[list[str], int]:
        """Lines for the first ``MAX_PAIRS`` pairs of children of one parent, paired on the
        validation items (the most any shape shows), and how many pairs there are."""
        sibling_sd = math.sqrt(2) * (self.noise.sd(tree) or 0.0)  # each sibling trained with a seed of its own
        text = siblings_text(tree, self.pair, lambda stderr: verdict_margin(stderr, sibling_sd), MAX_PAIRS,
                             script=self.script_of, same_script=self.same_script)
        return (text.splitlines() if text else []), len(sibling_pairs(tree))

    @staticmethod
    def siblings_section(siblings: tuple[list[str], int], shown: int) -> str:
        lines, total = siblings
        if not lines or not shown:
            return ""
        omitted = [f"- … {total - shown} more pairs omitted"] if total > shown else []
        return ("\n\n# Siblings: children of one parent, paired\n\nSame checkpoint, same items: the paired difference "
                "credits what differs (each has its own training noise: a verdict needs √2 × the stage spread).\n"
                + "\n".join(lines[:shown] + omitted))

    def dynamic(self, tree: Tree, view: PromptView, shape: dict, mattered: str,
                siblings: tuple[list[str], int] = ([], 0)) -> str:
        base = "unknown" if tree.base_score is None else f"{tree.base_score:.3f} ± {tree.base_stderr:.3f}"
        shown = self.detailed(tree, view)[: shape["blocks"]]
        with_curves = self.curve_order(tree, shown)[: shape["curves"]]
        shared = self.everywhere(tree)
        blocks = [self.candidate_block(tree, n, view, curves=n in with_curves, shared=shared) for n in shown]
        if None in view.expandable:  # the base model: one line, first when it is the pick
            line = self.candidate_block(tree, None, view, curves=False)
            blocks = [line, *blocks] if view.suggested is None else [*blocks, line]
        expandable = ", ".join(e or "base" for e in view.expandable)
        feedback = ("\n\n# Feedback on your last proposal\n\n" + "\n".join(f"- {f}" for f in view.feedback[-5:])
                    if view.feedback else "")
        timeouts = ("\n\n# Your requests that timed out\n\n" + "\n".join(f"- {t}" for t in view.timeouts[-5:])
                    if view.timeouts else "")
        return prompt(
            "propose", budget=view.budget, base_score=base, depth=self.depth_text(tree) + self.limit_text(tree),
            mattered=mattered,
            siblings=self.siblings_section(siblings, shape["siblings"]) + self.noise.measured_text(tree),
            winner=self.winner_text(tree), tpe=self.tpe_text(tree),
            edits=edits_text(tree, self.edit_summary, shape["edits"]),
            tree=self.tree_text(tree, shape["lines"], shape["failures"]), in_flight=self.in_flight_text(tree),
            pick=self.pick_text(tree, view), expandable=expandable,
            candidates=self.everywhere_text(tree, shared)
            + ("\n\n".join(blocks) or "(none yet: the first stage starts from the base model)"),
            timeouts=timeouts, feedback=feedback,
        ).strip()

    def messages(self, tree: Tree, view: PromptView) -> list[dict]:
        budget_chars = self.max_tokens * CHARS_PER_TOKEN
        static = self.static(tree)
        mattered = mattered_text(tree, self.space)  # once: it fits a forest
        siblings = self.sibling_lines(tree)  # once: it reads evaluation items
        for shape in SHAPES:
            user = static + "\n\n" + self.dynamic(tree, view, shape, mattered, siblings)
            if len(user) <= budget_chars:
                break
        if len(user) > budget_chars:  # only train.py can still be too long: keep its head and tail
            excess = len(user) - budget_chars + 40
            middle = len(self.train_py) // 2
            shortened = (self.train_py[: max(0, middle - excess // 2)] + "\n# … (middle omitted) …\n"
                         + self.train_py[middle + excess // 2:])
            user = self.static(tree, shortened) + "\n\n" + self.dynamic(tree, view, SHAPES[-1], mattered, siblings)
        return [{"role": "system", "content": self.system()}, {"role": "user", "content": user}]


# From the fullest prompt to the leanest: what is dropped first comes first.
SHAPES = [
    {"blocks": 6, "curves": 4, "lines": 30, "failures": 5, "edits": 10, "siblings": MAX_PAIRS},
    {"blocks": 5, "curves": 3, "lines": 20, "failures": 5, "edits": 8, "siblings": 3},
    {"blocks": 4, "curves": 2, "lines": 12, "failures": 3, "edits": 5, "siblings": 2},
    {"blocks": 3, "curves": 1, "lines": 8, "failures": 2, "edits": 3, "siblings": 1},
    {"blocks": 2, "curves": 1, "lines": 4, "failures": 1, "edits": 2, "siblings": 1},
    {"blocks": 1, "curves": 0, "lines": 2, "failures": 0, "edits": 1, "siblings": 0},
]


def newest(tree: Tree) -> list[str]:
    """The stage that ended last (empty: none is scored); stages run side by side end out of order."""
    scored = list(enumerate(tree.scored()))
    if not scored:
        return []
    return [max(scored, key=lambda item: (str(item[1].timing.get("ended_at", "")), item[0]))[1].id]


def _clip(text: str, limit: int) -> str:
    """Head and tail of a long text, the middle marked as omitted."""
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n… (middle omitted) …\n" + text[-limit // 2:]


RATIONALE_CHARS = 500  # of a proposal's rationale, shown again in later prompts (system.md says so)


def _clip_words(text: str, limit: int) -> str:
    """``text`` cut at a word boundary before ``limit`` characters, the cut marked."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def identical_prefix_share(prompts: list[str]) -> float:
    """The share of a session's prompt characters that repeat the previous prompt's start:
    what a provider's prompt cache can serve."""
    if len(prompts) < 2:
        return 0.0
    shared = 0
    for before, now in zip(prompts, prompts[1:]):
        n = 0
        for a, b in zip(before, now):
            if a != b:
                break
            n += 1
        shared += n
    return shared / sum(len(p) for p in prompts[1:])
