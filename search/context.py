"""What the LLM sees: everything a researcher would look at before choosing the next stage.

The prompt is built in two parts, in this order, so that a provider's prompt cache
(an identical prefix) applies to every request of a session:

1. what never changes in a session: the rules, the reply task, the research brief, the
   search space, how noisy a score is, and the template's ``train.py``;
2. what changes with every stage: the budget left, the depth limit and the nodes at it,
   the tree (one line a node, an edited node with a summary of its diff), the stages in
   flight (proposed, not scored yet: never dropped, so a proposal does not repeat one
   blindly), a block for each candidate parent (path, exact values, validation ± SE, the
   paired comparison with its parent, diagnosis findings with evidence, curve summary,
   the diff of its ``train.py``), recent failures, what became of requests that timed
   out (a late reply is discarded; what was proposed instead), and feedback on the last
   proposal.

Prompts are files in ``search/prompts/``; this module fills them in and keeps the user
message within a token budget (about 4 characters a token), dropping the least useful
parts first: the curves of lower-ranked candidates, then candidates, then tree lines
and failures, then the middle of long diffs and of ``train.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from string import Template as Text
from typing import Callable

from search.importance import importance_text, param_importance
from search.novelty import TOLERANCE
from search.space import SearchSpace
from search.tree import Node, Status, Tree, findings_text

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
                  else f"{p.type} in [{p.low:g}, {p.high:g}]" + (" (log scale)" if p.log else ""))
        lines.append(f"- `{p.name}`: {domain}; default {p.default!r}. {p.help}")
    return "\n".join(lines)


def diff_summary(diff: str) -> str:
    """One line for a unified diff: lines added and removed, and the first change."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    first = next((line for line in added if line), next((line for line in removed if line), ""))
    return f"+{len(added)}/-{len(removed)} lines, e.g. `{first[:80]}`"


@dataclass
class Noise:
    """How far apart two scores must be before they mean anything.

    ``stage_sd`` is the seed-to-seed spread of one stage (the same values from the same
    parent, another training seed), measured per template (``benchmarks/stage_spread.py``,
    stored in the template's ``[noise]`` constants); None when the template has none.
    """

    stage_sd: float | None = None
    source: str = ""

    def text(self, tree: Tree) -> str:
        se = tree.base_stderr or 0.0  # the base model's: known from the start, so this text never changes
        lines = [f"- Evaluation: a validation score's standard error is about {se:.3f} (binomial, "
                 "from the evaluator); a paired comparison of a child with its parent on the same items is "
                 "tighter."]
        if self.stage_sd is not None:
            lines.append(f"- Training randomness: the same stage with another seed scores with a spread of sd "
                         f"{self.stage_sd:.3f} ({self.source}). Two stages that differ by less than about "
                         f"{2 * max(self.stage_sd, se):.3f} are not distinguishable from one run each.")
        else:
            lines.append("- Training randomness: not measured for this template; expect the seed-to-seed spread "
                         "of a stage to be at least the evaluation's standard error.")
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
                 noise: Noise | None = None, max_depth: int = 3, hybrid: bool = False):
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

    # -- the part that never changes ------------------------------------------------------------

    def system(self) -> str:
        return prompt("system", tolerance=f"{TOLERANCE:.0%}", max_depth=self.max_depth).strip()

    def static(self, tree: Tree, train_py: str | None = None) -> str:
        return prompt(
            "static", task=prompt("task_hybrid" if self.hybrid else "task_llm").strip(),
            program=self.program.strip(), topic=self.topic, space=space_text(self.space),
            noise=self.noise.text(tree), train_py=self.train_py if train_py is None else train_py,
        ).strip() + "\n\n" + STATIC_END

    # -- the part that changes with every stage ------------------------------------------------

    def edit_note(self, node: Node) -> str:
        if not node.edited:
            return ""
        diff = self.diff(node.commit)
        return f" [edited train.py: {diff_summary(diff)}]" if diff else " [edited train.py]"

    def node_line(self, tree: Tree, node: Node) -> str:
        if node.scored:
            score = f"val {node.val_score:.3f} ± {node.val_stderr:.3f}"
            if node.comparison:
                c = node.comparison
                score += f" ({c.delta:+.3f} ± {c.stderr:.3f} paired vs parent: {c.verdict})"
            score += "".join(f", {key} {value:.3g}" for key, value in node.eval_metrics.items())
        else:
            score = node.status.value + (f" ({node.reason[:120]})" if node.reason else "")
        flags = [f.name for f in node.diagnosis if f.severity != "info"]
        at_limit = " [at depth limit]" if node.depth >= self.max_depth else ""
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
        lines = [self.node_line(tree, n) + (f"; proposed because: {n.rationale[:160]}" if n.rationale else "")
                 for n in flying]
        return ("\n\n# Stages in flight (proposed, not scored yet)\n\nTheir scores are not known yet; a proposal "
                "that nearly repeats one of them from the same parent is not run.\n" + "\n".join(lines))

    def depth_text(self, tree: Tree) -> str:
        full = [n.id for n in tree.scored() if n.depth >= self.max_depth]
        text = f"A path has at most {self.max_depth} stages: a node at stage {self.max_depth} cannot be extended."
        return text + (f" At the limit now: {', '.join(full)}." if full else " No node is at the limit yet.")

    def candidates(self, tree: Tree, view: PromptView, count: int) -> list[str | None]:
        """The policy's pick first, then the best expandable nodes by score."""
        ranked = sorted((e for e in view.expandable if e is not None), key=lambda e: tree.nodes[e].val_score,
                        reverse=True)
        chosen: list[str | None] = [view.suggested]
        chosen += [e for e in ranked if e not in chosen][: max(0, count - len(chosen))]
        return chosen + ([None] if None in view.expandable and None not in chosen else [])  # the base: one line

    def candidate_block(self, tree: Tree, node_id: str | None, view: PromptView, curves: bool) -> str:
        pick = " — the tree policy's pick" if node_id == view.suggested else ""
        if node_id is None:
            base = "unknown" if tree.base_score is None else f"{tree.base_score:.3f} ± {tree.base_stderr:.3f}"
            return (f"## base{pick}\n- the base model: validation {base}; "
                    f"{len(tree.children(None))} first stages started from it; train.py: the template's")
        node = tree.nodes[node_id]
        path = " → ".join(["base", *(n.id for n in tree.path(node_id))])
        lines = [f"## {node_id}{pick}", f"- path: {path} (stage {node.depth} of at most {self.max_depth})",
                 f"- values: {values_text(node.hyperparameters)}",
                 f"- validation: {node.val_score:.3f} ± {node.val_stderr:.3f}; {node.steps} GRPO steps"]
        if node.comparison:
            c = node.comparison
            lines.append(f"- against its parent (paired, same {c.n} items): "
                         f"{c.delta:+.3f} ± {c.stderr:.3f} → {c.verdict}")
        if node.rationale:
            lines.append(f"- why it was proposed: {node.rationale[:300]}")
        lines.append("- diagnosis:\n" + _indent(findings_text(node.diagnosis)))
        if curves:
            lines.append("- curves of its stage:\n" + _indent(self.curves(node_id)))
        diff = self.diff(node.commit).strip() if node.commit else ""
        lines.append("- train.py: the template's" if not diff else
                     f"- train.py: the template's with this diff (commit {node.commit[:10]}):\n```diff\n"
                     f"{_clip(diff, MAX_DIFF_CHARS)}\n```")
        return "\n".join(lines)

    def dynamic(self, tree: Tree, view: PromptView, shape: dict, mattered: str) -> str:
        base = "unknown" if tree.base_score is None else f"{tree.base_score:.3f} ± {tree.base_stderr:.3f}"
        chosen = self.candidates(tree, view, shape["candidates"])
        blocks = [self.candidate_block(tree, c, view, curves=i < shape["curves"]) for i, c in enumerate(chosen)]
        expandable = ", ".join(e or "base" for e in view.expandable)
        pick = (f"The tree policy picks **{view.suggested or 'base'}** (UCT over validation scores; you may choose "
                "any expandable node).")
        feedback = ("\n\n# Feedback on your last proposal\n\n" + "\n".join(f"- {f}" for f in view.feedback[-5:])
                    if view.feedback else "")
        timeouts = ("\n\n# Your requests that timed out\n\n" + "\n".join(f"- {t}" for t in view.timeouts[-5:])
                    if view.timeouts else "")
        return prompt(
            "propose", budget=view.budget, base_score=base, depth=self.depth_text(tree), mattered=mattered,
            tree=self.tree_text(tree, shape["lines"], shape["failures"]), in_flight=self.in_flight_text(tree),
            pick=pick, expandable=expandable,
            candidates="\n\n".join(blocks) or "(none yet: the first stage starts from the base model)",
            timeouts=timeouts, feedback=feedback,
        ).strip()

    def messages(self, tree: Tree, view: PromptView) -> list[dict]:
        budget_chars = self.max_tokens * CHARS_PER_TOKEN
        static = self.static(tree)
        mattered = importance_text(param_importance(tree, self.space), len(tree.scored()))  # once: it fits a forest
        for shape in SHAPES:
            user = static + "\n\n" + self.dynamic(tree, view, shape, mattered)
            if len(user) <= budget_chars:
                break
        if len(user) > budget_chars:  # only train.py can still be too long: keep its head and tail
            excess = len(user) - budget_chars + 40
            middle = len(self.train_py) // 2
            shortened = (self.train_py[: max(0, middle - excess // 2)] + "\n# … (middle omitted) …\n"
                         + self.train_py[middle + excess // 2:])
            user = self.static(tree, shortened) + "\n\n" + self.dynamic(tree, view, SHAPES[-1], mattered)
        return [{"role": "system", "content": self.system()}, {"role": "user", "content": user}]


# From the fullest prompt to the leanest: what is dropped first comes first.
SHAPES = [
    {"candidates": 4, "curves": 3, "lines": 30, "failures": 5},
    {"candidates": 4, "curves": 2, "lines": 20, "failures": 5},
    {"candidates": 3, "curves": 1, "lines": 12, "failures": 3},
    {"candidates": 2, "curves": 1, "lines": 8, "failures": 2},
    {"candidates": 1, "curves": 1, "lines": 4, "failures": 1},
    {"candidates": 1, "curves": 0, "lines": 2, "failures": 0},
]


def _clip(text: str, limit: int) -> str:
    """Head and tail of a long text, the middle marked as omitted."""
    if len(text) <= limit:
        return text
    return text[: limit // 2] + "\n… (middle omitted) …\n" + text[-limit // 2:]


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
