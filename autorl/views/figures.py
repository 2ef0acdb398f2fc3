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


def progress(data: dict, path: Path) -> Path | None:
    """Best validation score so far against stages spent and against wall time."""
    nodes = data["nodes"]
    curve = best_so_far(nodes)
    if not any(v is not None for v in curve):
        return None
    plt = pyplot()
    figure, (by_stage, by_time) = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    stages = list(range(1, len(nodes) + 1))
    by_stage.step(stages, [v if v is not None else float("nan") for v in curve], where="post", marker="o")
    by_stage.scatter(stages, [n["val_score"] if n["val_score"] is not None else float("nan") for n in nodes],
                     color="grey", s=14, zorder=3, label="each stage")
    minutes = minutes_since_start(nodes)
    pairs = [(m, v) for m, v in zip(minutes, curve) if m is not None and v is not None]
    if pairs:
        by_time.step([m for m, _ in pairs], [v for _, v in pairs], where="post", marker="o")
    for axis, label in ((by_stage, "stages spent"), (by_time, "minutes since the first stage")):
        if data.get("base_score") is not None:
            axis.axhline(data["base_score"], color="black", linestyle=":", linewidth=1, label="base model")
        axis.set_xlabel(label)
        axis.set_ylabel("best validation score so far")
        axis.grid(alpha=0.3)
    by_stage.xaxis.get_major_locator().set_params(integer=True)
    by_stage.legend(fontsize=8)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def tree(data: dict, path: Path) -> Path | None:
    """The search tree: a node per stage at its depth, coloured by score, the best path in red."""
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
        axis.annotate(label, (x, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
    axis.scatter([0], [0], color="black", s=60, zorder=2)
    axis.annotate(f"base {data.get('base_score') or 0:.3f}", (0, 0), xytext=(6, -3), textcoords="offset points",
                  fontsize=7)
    axis.set_xlabel("stage depth (0 = base model)")
    axis.set_ylabel("order of the stages")
    axis.invert_yaxis()
    axis.set_xticks(range(0, max(n["depth"] for n in nodes) + 1))
    axis.set_title("search tree: colour = validation score, × = failed, red = best path", fontsize=9)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def schedule(path_nodes: list[dict], path: Path) -> Path | None:
    """The winning schedule: each numeric hyperparameter across the stages of the best path."""
    numeric = [name for name, value in (path_nodes[0]["hyperparameters"] if path_nodes else {}).items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if not numeric:
        return None
    plt = pyplot()
    columns = min(4, len(numeric))
    rows = (len(numeric) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.0 * rows), squeeze=False,
                                constrained_layout=True)
    stages = list(range(1, len(path_nodes) + 1))
    for axis, name in zip(axes.flat, numeric):
        axis.plot(stages, [n["hyperparameters"].get(name) for n in path_nodes], marker="o")
        axis.set_title(name, fontsize=8)
        axis.set_xticks(stages)
        axis.tick_params(labelsize=7)
        if name == "learning_rate" or "lr" in name:
            axis.set_yscale("log")
    for axis in list(axes.flat)[len(numeric):]:
        axis.axis("off")
    figure.suptitle("winning schedule, stage by stage", fontsize=9)
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
