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
           "train_loss", "total_flos"}


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


def summarise(values: list[float]) -> dict[str, float] | None:
    """start/end/min/max and a least-squares slope per step.

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
            "nan_steps": len(values) - n}


def curve_keys(records: list[dict]) -> tuple[str, ...]:
    """The key curves, then every other number the stage logged beyond TRL's bookkeeping: the
    template's own metrics (per-reward means, its exact zero-variance share) and any metric an
    edit of train.py added, so a proposer sees whether a new term ever fired.

    >>> curve_keys([{"reward": 1.0, "loss": 0.1, "rewards/format/mean": 0.2, "rewards/format/std": 0.0}])
    ('reward', 'rewards/format/mean')
    """
    logged = dict.fromkeys(k for r in training_steps(records) for k, v in r.items() if isinstance(v, (int, float)))
    extra = [k for k in logged if k not in KEY_CURVES and k not in ROUTINE and not k.startswith("clip_ratio/")
             and not (k.startswith("rewards/") and k.endswith("/std"))]
    return tuple(k for k in KEY_CURVES if k in logged) + tuple(extra)


def summarise_curves(records: list[dict], keys: tuple[str, ...] | None = None) -> dict[str, dict]:
    """Summaries of ``keys`` (default: ``curve_keys`` of the records)."""
    keys = curve_keys(records) if keys is None else keys
    return {key: s for key in keys if (s := summarise(series(records, key))) is not None}


def curves_text(summary: dict[str, dict]) -> str:
    if not summary:
        return "(no metrics)"
    return "\n".join(
        f"- {key}: start {s['start']:.4g}, end {s['end']:.4g}, min {s['min']:.4g}, max {s['max']:.4g}, "
        f"trend {s['trend']:+.3g}/step" + (f", {s['nan_steps']} NaN steps" if s["nan_steps"] else "")
        for key, s in summary.items()
    )
