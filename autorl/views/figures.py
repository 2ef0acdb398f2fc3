"""The session report's figures, drawn from what MLflow holds about a session (``show`` data).

Each function writes one PNG and returns its path, or None when there is nothing to draw.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def best_so_far(nodes: list[dict]) -> list[float | None]:
    best, curve = None, []
    for node in nodes:
        if node["val_score"] is not None and (best is None or node["val_score"] > best):
            best = node["val_score"]
        curve.append(best)
    return curve


def minutes_since_start(nodes: list[dict]) -> list[float | None]:
    stamps = [n.get("timing", {}).get("ended_at") for n in nodes]
    starts = [n.get("timing", {}).get("started_at") for n in nodes if n.get("timing", {}).get("started_at")]
    if not starts:
        return [None] * len(nodes)
    origin = min(datetime.fromisoformat(s) for s in starts)
    return [(datetime.fromisoformat(s) - origin).total_seconds() / 60 if s else None for s in stamps]


def steps_spent(nodes: list[dict]) -> list[int]:
    """The session's GRPO training steps spent when each stage ended, stages in the order
    they were created (``show``'s order): the running sum of what each trained — the
    budget's unit (``--train-steps``), so a 40-step stage is twice as far along the axis as
    a 20-step one, and a stage that crashed counts the steps it ran.

    >>> steps_spent([{"steps": 20}, {"steps": 40}, {"steps": 0}, {"steps": 10}])
    [20, 60, 60, 70]
    """
    spent, running = [], 0
    for node in nodes:
        running += int(node.get("steps") or 0)
        spent.append(running)
    return spent


def progress(data: dict, path: Path) -> Path | None:
    """Best validation score so far against the GRPO training steps spent and against wall time."""
    nodes = data["nodes"]
    curve = best_so_far(nodes)
    if not any(v is not None for v in curve):
        return None
    plt = pyplot()
    figure, (by_steps, by_time) = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    steps = steps_spent(nodes)
    by_steps.step(steps, [v if v is not None else float("nan") for v in curve], where="post", marker="o",
                  label="best so far")
    by_steps.scatter(steps, [n["val_score"] if n["val_score"] is not None else float("nan") for n in nodes],
                     color="grey", s=14, zorder=3, label="each stage, where it ended")
    by_steps.set_xlim(left=0)
    minutes = minutes_since_start(nodes)
    pairs = [(m, v) for m, v in zip(minutes, curve) if m is not None and v is not None]
    if pairs:
        by_time.step([m for m, _ in pairs], [v for _, v in pairs], where="post", marker="o")
    for axis, label in ((by_steps, "GRPO training steps spent (session total)"),
                        (by_time, "minutes since the first stage")):
        if data.get("base_score") is not None:
            axis.axhline(data["base_score"], color="black", linestyle=":", linewidth=1, label="base model")
        axis.set_xlabel(label)
        axis.set_ylabel("best validation score so far")
        axis.grid(alpha=0.3)
    by_steps.xaxis.get_major_locator().set_params(integer=True)
    by_steps.legend(fontsize=8)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def tree(data: dict, path: Path) -> Path | None:
    """The search tree: a node per stage at its depth (stages from the base model) in the order
    the stages were created, coloured by score, labelled with the GRPO steps it trained, the
    best path in red."""
    nodes = data["nodes"]
    if not nodes:
        return None
    plt = pyplot()
    rows = {node["id"]: index + 1 for index, node in enumerate(nodes)}
    best_path = set(data["best"]["path"]) if data.get("best") else set()
    scores = [n["val_score"] for n in nodes if n["val_score"] is not None]
    low, high = (min(scores), max(scores)) if scores else (0.0, 1.0)
    figure, axis = plt.subplots(figsize=(8, max(3.0, 0.32 * len(nodes) + 1.2)), constrained_layout=True)
    colormap = plt.get_cmap("viridis")
    for node in nodes:
        x, y = node["depth"], rows[node["id"]]
        px, py = (0, 0) if node["parent"] is None else (node["depth"] - 1, rows.get(node["parent"], 0))
        on_best = node["id"] in best_path
        axis.plot([px, x], [py, y], color="crimson" if on_best else "lightgrey", linewidth=2.2 if on_best else 1,
                  zorder=1)
        if node["val_score"] is None:
            axis.scatter([x], [y], marker="x", color="grey", s=50, zorder=2)
            label = f"{node['id']} {node['status']}"
        else:
            shade = (node["val_score"] - low) / (high - low) if high > low else 0.5
            axis.scatter([x], [y], color=colormap(shade), s=90, zorder=2, edgecolors="crimson" if on_best else "none")
            label = f"{node['id']} {node['val_score']:.3f}"
        label += f" · {node.get('steps') or 0} steps"
        axis.annotate(label, (x, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
    axis.scatter([0], [0], color="black", s=60, zorder=2)
    axis.annotate(f"base {data.get('base_score') or 0:.3f}", (0, 0), xytext=(6, -3), textcoords="offset points",
                  fontsize=7)
    axis.set_xlabel("stage depth (0 = base model)")
    axis.set_ylabel("order the stages were created in")
    axis.invert_yaxis()
    deepest = max(n["depth"] for n in nodes)
    axis.set_xticks(range(0, deepest + 1))
    axis.set_xlim(-0.2, deepest + 0.75)  # room for the deepest nodes' labels
    axis.set_title("search tree: colour = validation score, × = failed, red = best path; "
                   "each node: its score · the GRPO steps it trained", fontsize=9)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def path_steps(path_nodes: list[dict]) -> list[int]:
    """Where each stage of a root-to-leaf path starts on the path's GRPO-step axis, then where
    the last one ends: the running sum of the steps each trained (a stage's ``step_offset``,
    MLflow's step axis for its metrics).

    >>> path_steps([{"steps": 24}, {"steps": 8}, {"steps": 40}])
    [0, 24, 32, 72]
    """
    edges = [0]
    for node in path_nodes:
        edges.append(edges[-1] + int(node.get("steps") or 0))
    return edges


def schedule(path_nodes: list[dict], path: Path) -> Path | None:
    """The winning schedule: each numeric hyperparameter over the GRPO steps of the best path,
    held for as many steps as its stage trained."""
    numeric = [name for name, value in (path_nodes[0]["hyperparameters"] if path_nodes else {}).items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if not numeric:
        return None
    plt = pyplot()
    columns = min(4, len(numeric))
    rows = (len(numeric) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.0 * rows + 0.3), squeeze=False,
                                constrained_layout=True)
    edges = path_steps(path_nodes)
    for axis, name in zip(axes.flat, numeric):
        values = [n["hyperparameters"].get(name) for n in path_nodes]
        axis.step(edges, [*values, values[-1]], where="post")
        axis.scatter(edges[:-1], values, s=14, zorder=3)  # where each stage starts
        axis.set_title(name, fontsize=8)
        axis.set_xticks(edges)
        axis.set_xlim(0, max(edges[-1], 1))
        if name == "learning_rate" or "lr" in name:
            axis.set_yscale("log")
        axis.tick_params(which="both", labelsize=7)  # a log axis within a decade labels its minor ticks
    for axis in list(axes.flat)[len(numeric):]:
        axis.axis("off")
    figure.supxlabel("GRPO training steps along the winning path", fontsize=8)
    figure.suptitle("winning schedule: " + " › ".join(["base", *(n["id"] for n in path_nodes)])
                    + ", each stage's values held for the steps it trained", fontsize=9)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def val_test_gap(data: dict, path: Path) -> Path | None:
    """Validation and test scores of the base model and the winner, with standard errors."""
    best = data.get("best")
    if not best or best.get("test_score") is None:
        return None
    plt = pyplot()
    entries: list[tuple[str, Any, Any, Any, Any]] = [
        ("base model", data.get("base_score"), data.get("base_stderr"), data.get("base_test_score"), None),
        (f"winner {best['id']}", best["val_score"], best["val_stderr"], best["test_score"], best.get("test_stderr")),
    ]
    figure, axis = plt.subplots(figsize=(5, 3.2), constrained_layout=True)
    for offset, (split, index, stderr_index) in enumerate((("validation", 1, 2), ("test", 3, 4))):
        xs = [i + (offset - 0.5) * 0.35 for i in range(len(entries))]
        values = [e[index] if e[index] is not None else float("nan") for e in entries]
        errors = [e[stderr_index] or 0.0 for e in entries]
        axis.bar(xs, values, width=0.35, yerr=errors, capsize=4, label=split)
    axis.set_xticks(range(len(entries)), [e[0] for e in entries])
    axis.set_ylabel("score (± standard error)")
    axis.legend(fontsize=8)
    axis.grid(axis="y", alpha=0.3)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def importance(data: dict, path: Path) -> Path | None:
    """Each parameter's share of the variance of a stage's gain (fANOVA), as horizontal bars."""
    shares = data.get("importance")
    if not shares:
        return None
    plt = pyplot()
    names = list(shares)[::-1]
    figure, axis = plt.subplots(figsize=(5, 0.35 * len(names) + 1.0), constrained_layout=True)
    axis.barh(names, [shares[n] for n in names], color="#4c72b0")
    axis.set_xlim(0, 1)
    axis.set_xlabel("share of the gain's variance (fANOVA)")
    axis.grid(axis="x", alpha=0.3)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
