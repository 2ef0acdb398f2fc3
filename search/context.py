"""What the LLM sees: the brief, the space, a compact tree, the parent's curves and code.

Prompts are files in ``search/prompts/``; this module only fills them in and keeps the
result within a token budget (about 4 characters a token), dropping the least useful
parts first: older failures, then lower-ranked nodes, then the middle of train.py.
"""

from __future__ import annotations

from pathlib import Path
from string import Template as Text
from typing import Callable

from search.space import SearchSpace
from search.tree import Node, Status, Tree, findings_text, schedule_text

PROMPTS = Path(__file__).with_name("prompts")
CHARS_PER_TOKEN = 4


def prompt(name: str, **values) -> str:
    return Text((PROMPTS / f"{name}.md").read_text()).safe_substitute(**values)


def space_text(space: SearchSpace) -> str:
    lines = []
    for p in space.params.values():
        domain = f"one of {p.choices}" if p.type == "categorical" else f"{p.type} in [{p.low:g}, {p.high:g}]" + (" (log scale)" if p.log else "")
        lines.append(f"- `{p.name}`: {domain}; default {p.default!r}. {p.help}")
    return "\n".join(lines)


def node_line(tree: Tree, node: Node) -> str:
    parent_score = tree.score_of(node.parent)
    gain = "" if node.val_score is None or parent_score is None else f" ({node.val_score - parent_score:+.3f} vs parent)"
    score = f"val {node.val_score:.3f} ± {node.val_stderr:.3f}{gain}" if node.scored else f"{node.status.value}"
    edited = " [edited train.py]" if node.edited else ""
    extra = "".join(f", {key} {value:.3g}" for key, value in node.eval_metrics.items()) if node.scored else ""
    return (f"- {node.id} ← {node.parent or 'base'} (stage {node.depth}): {score}{extra}; "
            f"{schedule_text(node.hyperparameters)}{edited}")


def tree_text(tree: Tree, top: int = 8, failures: int = 5) -> str:
    if not tree.nodes:
        return "No stage has run yet."
    ranked = sorted(tree.scored(), key=lambda n: n.val_score, reverse=True)[:top]
    lines = ["Best nodes:"] + [node_line(tree, n) for n in ranked]
    failed = [n for n in tree.nodes.values() if n.status == Status.FAILED][-failures:]
    if failed:
        lines.append("Recent failures:")
        lines += [f"- {n.id} ← {n.parent or 'base'}: {n.reason[:200]}" for n in failed]
    lines.append(f"({len(tree.nodes)} nodes in all, {len(tree.scored())} scored)")
    return "\n".join(lines)


class ContextBuilder:
    """Fills the prompts; ``curves`` gives a stage's curve summary by node id (the
    application reads it from the node's metrics, so the search never opens files)."""

    def __init__(self, program: str, topic: str, space: SearchSpace, curves: Callable[[str], str],
                 max_tokens: int = 6000):
        self.program = program
        self.topic = topic
        self.space = space
        self.curves = curves
        self.max_tokens = max_tokens

    def parent_curves(self, parent: str | None) -> str:
        if parent is None:
            return "(the base model has no training curves)"
        return self.curves(parent)

    @staticmethod
    def parent_diagnosis(tree: Tree, parent: str | None) -> str:
        if parent is None:
            return "(base model)"
        node = tree.nodes[parent]
        text = findings_text(node.diagnosis)
        comparison = node.comparison
        if comparison:
            text += (f"\nAgainst its own parent (paired, same items): {comparison.delta:+.3f} ± "
                     f"{comparison.stderr:.3f} → {comparison.verdict}")
        return text

    def messages(self, tree: Tree, suggested: str | None, expandable: list[str | None], train_py: str,
                 commit: str, budget: str, feedback: list[str], hybrid: bool) -> list[dict]:
        top, failures = 8, 5
        while True:
            user = prompt(
                "propose",
                program=self.program.strip(), topic=self.topic, space=space_text(self.space),
                base_score="unknown" if tree.base_score is None else f"{tree.base_score:.3f} ± {tree.base_stderr:.3f}",
                budget=budget, tree=tree_text(tree, top, failures), suggested=suggested or "base",
                expandable=", ".join(e or "base" for e in expandable), curves=self.parent_curves(suggested),
                diagnosis=self.parent_diagnosis(tree, suggested),
                commit=commit[:10], train_py=train_py,
                feedback=("\n# Feedback on earlier proposals\n\n" + "\n".join(f"- {f}" for f in feedback[-5:]) + "\n")
                if feedback else "",
                task=prompt("task_hybrid" if hybrid else "task_llm").strip(),
            )
            if len(user) <= self.max_tokens * CHARS_PER_TOKEN or (top <= 2 and failures == 0):
                break
            top, failures = max(2, top // 2), max(0, failures - 2)
        budget_chars = self.max_tokens * CHARS_PER_TOKEN
        if len(user) > budget_chars:  # only train.py can still be too long: keep its head and tail
            excess = len(user) - budget_chars + 40
            middle = len(train_py) // 2
            user = user.replace(train_py, train_py[: middle - excess // 2] + "\n# … (middle omitted) …\n"
                                + train_py[middle + excess // 2:])
        return [{"role": "system", "content": prompt("system").strip()}, {"role": "user", "content": user}]
