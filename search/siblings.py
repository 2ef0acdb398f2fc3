"""Children of one parent, paired: the cleanest comparison a tree offers.

Two siblings start from the same checkpoint and are scored on the same validation items,
so their difference item by item is much tighter than two scores side by side, and the
values that differ between them are the only explanation besides training noise. Each
sibling carries its own training noise, so a verdict between two of them needs √2 times
the template's seed-to-seed spread (the application passes the comparison in: search/
never opens an evaluation file).
"""

from __future__ import annotations

from typing import Callable

from search.tree import Comparison, Node, Tree

MAX_PAIRS = 6  # pairs in the prompt at most (fewer as it shrinks): those under the best path come first


def sibling_pairs(tree: Tree) -> list[tuple[Node, Node]]:
    """Each scored child against the best-scoring of its siblings, parents on the best path
    first (nearest the best node first), then parents by score."""
    best = tree.best()
    on_path = ([n.id for n in reversed(tree.path(best.id))] if best is not None else []) + [None]
    parents = {n.parent for n in tree.scored()}
    rank = {parent: i for i, parent in enumerate(on_path)}

    def parent_order(parent: str | None) -> tuple:
        score = tree.nodes[parent].val_score if parent is not None and tree.nodes[parent].scored else 0.0
        return (rank.get(parent, len(rank)), -(score or 0.0))

    pairs = []
    for parent in sorted(parents, key=parent_order):
        children = sorted((n for n in tree.scored() if n.parent == parent), key=lambda n: -n.val_score)
        pairs += [(children[0], other) for other in children[1:]]
    return pairs


def differences(a: Node, b: Node, script: Callable[[Node], str] | None = None,
                same_script: Callable[[Node, Node], bool] | None = None) -> str:
    """What differs between two siblings: their values, and train.py (``script`` names a
    node's: by default only whether its proposal edited it; ``same_script`` says whether two
    commits hold the same file: by default only when they are one commit)."""
    script = script or _script
    same = same_script(a, b) if same_script else a.commit == b.commit
    changed = changed_values(a, b)
    if not same:
        changed.append(f"train.py {script(a)} vs {script(b)}")
    if not changed:
        return "nothing (the same values and train.py: the gap is training noise)"
    if a.commit != b.commit and same:
        changed[-1] += " (train.py: the same edit in both)"
    credit = f" ({len(changed)} differ at once: the gap cannot be credited to one)" if len(changed) > 2 else ""
    return "; ".join(changed) + credit


def changed_values(a: Node, b: Node) -> list[str]:
    """The values that differ between two nodes, as ``name a vs b``."""
    return [f"{name} {_short(value)} vs {_short(b.hyperparameters.get(name))}"
            for name, value in a.hyperparameters.items() if value != b.hyperparameters.get(name)]


def siblings_text(tree: Tree, compare: Callable[[str, str], Comparison | None], margin: Callable[[float], float],
                  limit: int = MAX_PAIRS, script: Callable[[Node], str] | None = None,
                  same_script: Callable[[Node, Node], bool] | None = None) -> str:
    """The prompt's lines on sibling pairs ("" when no parent has two scored children).
    ``compare(a, b)`` is a minus b paired on the validation items; ``margin(stderr)`` the
    distance a difference must go past to be a verdict."""
    lines = []
    for a, b in sibling_pairs(tree)[:limit]:
        parent = a.parent or "base"
        comparison = compare(a.id, b.id)
        if comparison is None:
            gap = f"{a.val_score - b.val_score:+.3f} (unpaired: the items are not at hand)"
        else:
            bar = margin(comparison.stderr)
            verdict = "tie" if abs(comparison.delta) <= bar else f"{a.id if comparison.delta > 0 else b.id} better"
            gap = f"{comparison.delta:+.3f} ± {comparison.stderr:.3f} paired on {comparison.n} items → {verdict} " \
                  f"(beyond ±{bar:.3f})"
        differ = differences(a, b, script, same_script)
        lines.append(f"- {a.id} − {b.id} (both from {parent}): {gap}; they differ in: {differ}")
    return "\n".join(lines)


def _script(node: Node) -> str:
    return "edited by its proposal" if node.edited else "the parent's"


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)
