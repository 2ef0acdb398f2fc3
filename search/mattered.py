"""What has mattered so far: how much a stage gained at each depth, and which values went
with the gain, from fANOVA's shares once ``MIN_STAGES`` stages are scored and a rough,
labelled early estimate from ``EARLY_STAGES`` (rank correlations, mean gain per value).
Gains are centred per depth, since depth moves the gain whatever the values.
"""

from __future__ import annotations

from search.importance import MIN_STAGES, fits, gains, gains_by_depth, importance_text, param_importance
from search.space import SearchSpace
from search.tree import Tree

EARLY_STAGES = 3  # scored stages before a rough early estimate of what mattered (fANOVA needs MIN_STAGES)


def _ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def rank_correlation(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (None when either side does not vary).

    >>> round(rank_correlation([1e-5, 1e-4, 1e-3], [0.05, 0.01, -0.3]), 9)
    -1.0
    """
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sx = sum((r - mx) ** 2 for r in rx) ** 0.5
    sy = sum((r - my) ** 2 for r in ry) ** 0.5
    if not sx or not sy:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sx * sy)


def early_importance_text(observed: list[tuple[dict, float]], space: SearchSpace) -> str:
    """What a handful of scored stages say about each parameter that varied among them: for a
    numeric one, the rank correlation of its value with the gain over the parent; for a
    categorical one, the mean gain at each value tried. Labelled as rough, with its count."""
    lines = []
    for name, param in space.params.items():
        values = [v[name] for v, _ in observed]
        if len({repr(v) for v in values}) < 2:
            continue
        gain = [g for _, g in observed]
        if param.type == "categorical":
            means = []
            for choice in param.choices:
                got = [g for v, g in zip(values, gain) if v == choice]
                if got:
                    means.append((sum(got) / len(got), f"{sum(got) / len(got):+.3f} at {choice!r} ({len(got)})"))
            if all(abs(m) < 1e-9 for m, _ in means):
                continue  # every depth ran one value: centred per depth, its gains are zero by construction
            spread = max(m for m, _ in means) - min(m for m, _ in means)
            lines.append(((1, -spread), f"- {name}: mean gain " + ", ".join(text for _, text in means)))
        else:
            rho = rank_correlation([float(v) for v in values], gain)
            if rho is None:
                continue
            lines.append(((0, -abs(rho)), f"- {name}: rank correlation {rho:+.2f} with the gain (values "
                                           f"{min(values):.3g} to {max(values):.3g})"))
    if not lines:
        return f"(nothing to compare yet: the {len(observed)} scored stages all ran the same values)"
    lines.sort(key=lambda line: line[0])  # numeric by the size of the correlation, then categorical by spread
    return (f"A rough early estimate from {len(observed)} scored stages (fANOVA's shares need {MIN_STAGES}): how "
            "each parameter that varied went with the stage's gain over its parent, centred per depth (numeric: rank "
            "correlation, +1 = higher values gained more; categorical: mean gain at each value, with the number "
            "of stages). Several parameters changed at once between these stages, and one more stage can reverse "
            "a sign: read it as a hint, not a finding.\n" + "\n".join(text for _, text in lines))


def mattered_text(tree: Tree, space: SearchSpace) -> str:
    """How much a stage gained at each depth; then, from gains centred per depth, fANOVA's
    shares from ``MIN_STAGES`` scored stages, before that a rough early estimate from
    ``EARLY_STAGES``, before that why there is none."""
    observed = [(values, gain) for values, gain in gains(tree, within_depth=True)
                if all(fits(space, n, values) for n in space.params)]
    by_depth = compute_text(tree) + depth_text(tree)
    importance = param_importance(tree, space, within_depth=True)
    if importance is not None:
        return by_depth + importance_text(importance, len(observed))
    if len(observed) < EARLY_STAGES:
        return by_depth + (f"(not yet: {len(observed)} scored stage{'s' * (len(observed) != 1)} at a depth holding "
                           "another to compare with; a stage alone at its depth shows depth's effect, not its values'; "
                           f"a rough early estimate needs {EARLY_STAGES}, fANOVA's shares {MIN_STAGES})")
    return by_depth + early_importance_text(observed, space)


def compute_text(tree: Tree) -> str:
    """Validation against the steps a node's whole path trained, and how much of the spent
    budget the best node's path holds: the result is one path, whatever else was run."""
    best_at: dict[int, list] = {}
    for node in tree.scored():
        best_at.setdefault(node.path_steps, []).append(node)
    if not best_at:
        return ""
    points = []
    for total, nodes in sorted(best_at.items()):
        top = max(nodes, key=lambda n: n.val_score)
        of = f", best of {len(nodes)}" if len(nodes) > 1 else ""
        points.append(f"{total} → {top.val_score:.3f} ({top.id}{of})")
    on_path = tree.best().path_steps
    spent = sum(n.steps for n in tree.nodes.values())
    return (f"Validation by the GRPO steps a node's path trained from the base model (the best node at each "
            f"total): {', '.join(points)}. The best node's path trained {on_path} of the {spent} steps spent; "
            f"the other {spent - on_path} trained stages off it.\n")


def depth_text(tree: Tree) -> str:
    """The mean gain over the parent at each stage depth, and what the estimates below do with it."""
    by_depth = gains_by_depth(tree)
    if not by_depth:
        return ""
    means = ", ".join(f"stage {depth} {sum(got) / len(got):+.3f} (mean of {len(got)}"
                      + (f", from {min(got):+.3f} to {max(got):+.3f})" if len(got) > 1 else ")")
                      for depth, got in by_depth.items())
    return (f"Validation gain over the parent by stage depth: {means}. Depth moves the gain whatever the values "
            "(a later stage usually gains less), so what follows compares each stage only with the others at its "
            "depth (its gain less their mean gain; a stage alone at its depth is left out).\n")
