"""What the session's train.py edits did, for the next proposal.

An edit is judged like a researcher judges one: against its parent (the paired
comparison the evaluator allows), and where the tree holds one, against a sibling that
started from the same parent with the parent's ``train.py`` — the nearest thing to the
same stage without the edit. A failed edited stage is listed with its reason, so a
crash is not proposed twice.
"""

from __future__ import annotations

from typing import Callable

from search.siblings import changed_values
from search.tree import Node, Tree


def edits_text(tree: Tree, summary: Callable[[Node], str], limit: int = 10) -> str:
    """One line per stage that edited train.py (``summary`` names the edit), in the order they
    ran: the latest ``limit`` of them."""
    edited = [node for node in tree.nodes.values() if node.edited]
    if not edited:
        return "No stage has edited train.py yet: every score so far comes from the template's train.py."
    shown = edited[-limit:] if limit > 0 else []
    omitted = [f"- … {len(edited) - len(shown)} earlier edited stages omitted"] if len(shown) < len(edited) else []
    return "\n".join(omitted + [edit_line(tree, node, summary(node)) for node in shown])


def edit_line(tree: Tree, node: Node, summary: str) -> str:
    head = f"- {node.id} ← {node.parent or 'base'}: {summary}"
    if not node.scored:
        return f"{head}; {node.status.value}" + (f" ({node.reason[:160]})" if node.reason else "")
    parts = [f"val {node.val_score:.3f}"]
    if node.comparison:
        c = node.comparison
        parts.append(f"{c.delta:+.3f} ± {c.stderr:.3f} against its parent ({c.verdict})")
    twin = unedited_sibling(tree, node)
    if twin is not None:
        parts.append(f"{node.val_score - twin.val_score:+.3f} against {twin.id}, a sibling with the parent's "
                     f"train.py (val {twin.val_score:.3f}){also_differs(node, twin)}")
    else:
        parts.append("no sibling without the edit to compare with")
    return f"{head}; " + "; ".join(parts)


def unedited_sibling(tree: Tree, node: Node) -> Node | None:
    """The scored sibling with the parent's train.py whose values are nearest the node's
    (the count of differing values; ties: the earlier sibling)."""
    parent_commit = tree.nodes[node.parent].commit if node.parent else None
    siblings = [s for s in tree.children(node.parent) if s.id != node.id and s.scored and not s.edited
                and (parent_commit is None or s.commit == parent_commit)]
    if not siblings:
        return None
    return min(siblings, key=lambda s: sum(s.hyperparameters.get(k) != v for k, v in node.hyperparameters.items()))


def also_differs(node: Node, twin: Node) -> str:
    """What besides the edit sets the two apart ("" when only the edit does): a gap with
    other values changed too cannot be credited to the edit alone."""
    changed = changed_values(node, twin)
    return f", which also differs in {', '.join(changed)}: the gap is not the edit's alone" if changed else ""
