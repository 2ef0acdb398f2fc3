"""A PNG of a stage's key curves, logged with its node."""

from __future__ import annotations

from pathlib import Path

from autorl.analysis.curves import series, training_steps

PANELS = (("reward", "reward"), ("entropy", "entropy"), ("completions/mean_length", "mean length"),
          ("frac_reward_zero_std", "zero-variance groups"))


def plot_curves(records: list[dict], path: Path, title: str) -> Path | None:
    """Write a 2×2 figure of reward, entropy, length and zero-variance fraction; None if no data."""
    if not any(series(records, key) for key, _ in PANELS):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(8, 5), constrained_layout=True)
    for axis, (key, label) in zip(axes.flat, PANELS):
        steps = [int(r["step"]) for r in training_steps(records) if isinstance(r.get(key), (int, float))]
        axis.plot(steps, series(records, key), marker=".", linewidth=1)
        axis.set_title(label, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.tick_params(labelsize=7)
    figure.suptitle(title, fontsize=10)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
