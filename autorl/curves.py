"""Compact summaries of a stage's metric curves (metrics.jsonl), tolerant of missing keys."""

from __future__ import annotations

import json
import math
from pathlib import Path

KEY_CURVES = ("reward", "reward_std", "entropy", "kl", "completions/mean_length", "completions/clipped_ratio",
              "frac_reward_zero_std", "grad_norm")


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


def summarise_curves(records: list[dict], keys: tuple[str, ...] = KEY_CURVES) -> dict[str, dict]:
    return {key: s for key in keys if (s := summarise(series(records, key))) is not None}


def curves_text(summary: dict[str, dict]) -> str:
    if not summary:
        return "(no metrics)"
    return "\n".join(
        f"- {key}: start {s['start']:.4g}, end {s['end']:.4g}, min {s['min']:.4g}, max {s['max']:.4g}, "
        f"trend {s['trend']:+.3g}/step" + (f", {s['nan_steps']} NaN steps" if s["nan_steps"] else "")
        for key, s in summary.items()
    )
