"""Compact summaries of a stage's metric curves (metrics.jsonl), tolerant of missing keys."""

from __future__ import annotations

import json
import math
from pathlib import Path

KEY_CURVES = ("reward", "reward_std", "entropy", "kl", "completions/mean_length", "completions/clipped_ratio",
              "frac_reward_zero_std", "grad_norm")
# TRL's bookkeeping keys: logged every step, rarely what a diagnosis or a proposal turns on.
ROUTINE = {"step", "loss", "learning_rate", "num_tokens", "epoch", "step_time", "completions/min_length",
           "completions/max_length", "completions/mean_terminated_length", "completions/min_terminated_length",
           "completions/max_terminated_length", "train_runtime", "train_samples_per_second", "train_steps_per_second",
           "train_loss", "total_flos", "max_grad_norm"}  # max_grad_norm: a setting, logged for the diagnosis


def read_records(path: Path) -> list[dict]:
    records = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def training_steps(records: list[dict]) -> list[dict]:
    """Per-step records, without TRL's end-of-training summary line."""
    return [r for r in records if "train_runtime" not in r]


def series(records: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in training_steps(records) if isinstance(r.get(key), (int, float))]


def window_means(values: list[float], parts: int = 4) -> list[float]:
    """The means of ``parts`` consecutive, near-equal stretches of a curve (fewer when it has
    fewer points): what a noisy per-step value did across the stage, where its first and last
    steps alone can mislead.

    >>> window_means([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    [1.5, 3.5, 5.5, 7.5]
    >>> window_means([0.2, 0.9, 0.7])
    [0.2, 0.9, 0.7]
    """
    parts = min(parts, len(values))
    bounds = [round(i * len(values) / parts) for i in range(parts + 1)]
    return [sum(values[a:b]) / (b - a) for a, b in zip(bounds, bounds[1:])]


def summarise(values: list[float]) -> dict | None:
    """start/end/min/max, the means by quarter (``windows``) and a least-squares slope per step.

    >>> summarise([1.0, 2.0, 3.0])["trend"]
    1.0
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    n = len(finite)
    mean_x, mean_y = (n - 1) / 2, sum(finite) / n
    var_x = sum((i - mean_x) ** 2 for i in range(n))
    slope = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(finite)) / var_x if var_x else 0.0
    return {"start": finite[0], "end": finite[-1], "min": min(finite), "max": max(finite), "trend": slope,
            "windows": window_means(finite), "steps": n, "nan_steps": len(values) - n}


def curve_keys(records: list[dict]) -> tuple[str, ...]:
    """The key curves, then every other number the stage logged beyond TRL's bookkeeping: the
    template's own metrics (per-reward means, its exact zero-variance share) and any metric an
    edit of train.py added, so a proposer sees whether a new term ever fired.

    >>> curve_keys([{"reward": 1.0, "loss": 0.1, "rewards/format/mean": 0.2, "rewards/format/std": 0.0}])
    ('reward', 'rewards/format/mean')
    """
    logged = dict.fromkeys(k for r in training_steps(records) for k, v in r.items() if isinstance(v, (int, float)))
    if "frac_reward_constant" in logged:  # the template's exact count supersedes TRL's float comparison
        logged.pop("frac_reward_zero_std", None)
    extra = [k for k in logged if k not in KEY_CURVES and k not in ROUTINE and not k.startswith("clip_ratio/")
             and not (k.startswith("rewards/") and k.endswith("/std"))]
    return tuple(k for k in KEY_CURVES if k in logged) + tuple(extra)


def summarise_curves(records: list[dict], keys: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Summaries of ``keys`` (default: ``curve_keys`` of the records)."""
    keys = curve_keys(records) if keys is None else keys
    return {key: s for key in keys if (s := summarise(series(records, key))) is not None}


def curves_text(summary: dict[str, dict]) -> str:
    """One line a curve: the mean of each quarter of the stage (the shape, robust to one noisy
    step), then the first and last step and the range. No fitted slope: on a noisy curve it
    can point against what the quarters show."""
    if not summary:
        return "(no metrics)"
    lines = []
    for key, s in summary.items():
        windows = s.get("windows") or [s["start"], s["end"]]
        part = {4: "quarter", 3: "third", 2: "half"}.get(len(windows), "step")
        lines.append(f"- {key}: mean by {part} " + " → ".join(f"{w:.3g}" for w in windows)
                     + f" (first step {s['start']:.3g}, last {s['end']:.3g}; min {s['min']:.3g}, max {s['max']:.3g})"
                     + (f", {s['nan_steps']} NaN steps" if s["nan_steps"] else ""))
    return "\n".join(lines)
