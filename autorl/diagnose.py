"""Diagnosis of a training stage from its curves and its evaluation.

Each detector reads TRL's per-step metrics (``metrics.jsonl``), tolerates missing keys,
and returns a Finding with a name, a severity, evidence (steps and values) and a
suggested direction. The findings go to MLflow with the node and into the context of
the next proposal.

Zero-variance groups use TRL's ``frac_reward_zero_std``. It is exact when reward
weights are binary-exact (the arith template uses 1.0 and 0.25); with weights like 0.2
a constant group's float32 std is ~1e-8 and is not counted, so templates should keep
binary-exact weights.
"""

from __future__ import annotations

import math

from autorl.curves import series, training_steps
from search.tree import Comparison, Finding


def _steps(records: list[dict], key: str) -> list[int]:
    return [int(r.get("step", i)) for i, r in enumerate(training_steps(records)) if isinstance(r.get(key), (int, float))]


def _span(records, key) -> tuple[int, int]:
    steps = _steps(records, key)
    return (steps[0], steps[-1]) if steps else (0, 0)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _tail(values: list[float]) -> list[float]:
    return values[len(values) // 2:]


def entropy_collapse(records) -> Finding | None:
    entropy = series(records, "entropy")
    if len(entropy) < 4 or entropy[0] <= 0:
        return None
    end = _mean(entropy[-2:])
    if end < 0.25 * entropy[0] and end < 0.1:
        return Finding("entropy_collapse", "warning",
                       f"entropy fell from {entropy[0]:.3f} to {end:.3f}",
                       "raise temperature or lower the learning rate; the policy has stopped exploring",
                       _span(records, "entropy"), {"start": entropy[0], "end": end})
    return None


def reward_plateau(records) -> Finding | None:
    reward = series(records, "reward")
    if len(reward) < 8:
        return None
    tail = _tail(reward)
    gain = _mean(tail[len(tail) // 2:]) - _mean(tail[: len(tail) // 2])
    if abs(gain) < 0.01 and max(tail) - min(tail) < 0.15:
        return Finding("reward_plateau", "info",
                       f"reward flat over the second half (≈{_mean(tail):.3f}, change {gain:+.3f})",
                       "change something: a higher learning rate, larger groups, or a new stage from another node",
                       _span(records, "reward"), {"level": _mean(tail), "change": gain})
    return None


def zero_variance_groups(records) -> Finding | None:
    frac = series(records, "frac_reward_zero_std")
    if len(frac) < 2:
        return None
    tail = _mean(_tail(frac))
    if tail >= 0.6:
        severity = "critical" if tail >= 0.9 else "warning"
        return Finding("zero_variance_groups", severity,
                       f"{tail:.0%} of groups had identical rewards in the second half (no gradient from them)",
                       "larger groups (num_generations), higher temperature, or harder/easier prompts",
                       _span(records, "frac_reward_zero_std"), {"fraction": tail})
    return None


def kl_blowup(records) -> Finding | None:
    kl = series(records, "kl")
    if len(kl) < 4:
        return None
    early = max(_mean(kl[: max(1, len(kl) // 4)]), 1e-4)
    peak = max(kl)
    if peak > 0.1 and peak > 10 * early:
        return Finding("kl_blowup", "warning", f"KL rose to {peak:.3f} from {early:.4f}",
                       "raise beta or lower the learning rate", _span(records, "kl"), {"early": early, "peak": peak})
    return None


def length_problems(records) -> Finding | None:
    clipped = series(records, "completions/clipped_ratio")
    length = series(records, "completions/mean_length")
    if clipped and _mean(_tail(clipped)) > 0.2:
        tail = _mean(_tail(clipped))
        return Finding("length_truncation", "critical" if tail > 0.5 else "warning",
                       f"{tail:.0%} of completions hit max_completion_length in the second half",
                       "raise max_completion_length, or penalise length if the answers are padded",
                       _span(records, "completions/clipped_ratio"), {"clipped_ratio": tail})
    if len(length) >= 4 and length[0] > 0 and _mean(length[-2:]) > 2 * length[0]:
        return Finding("length_explosion", "warning",
                       f"mean completion length grew from {length[0]:.1f} to {_mean(length[-2:]):.1f} tokens",
                       "check for padding or repetition; cap max_completion_length",
                       _span(records, "completions/mean_length"), {"start": length[0], "end": _mean(length[-2:])})
    return None


def instability(records) -> Finding | None:
    for key in ("loss", "reward", "grad_norm"):
        values = [r.get(key) for r in training_steps(records) if key in r]
        bad = [v for v in values if not isinstance(v, (int, float)) or not math.isfinite(v)]
        if bad:
            return Finding("non_finite", "critical", f"{len(bad)} steps with non-finite {key}",
                           "lower the learning rate; check the reward functions", _span(records, key), {"key": key})
    grad = series(records, "grad_norm")
    if len(grad) >= 6:
        median = sorted(grad)[len(grad) // 2]
        spikes = [g for g in grad if g > 10 * max(median, 1e-8)]
        if spikes:
            return Finding("grad_norm_spikes", "warning", f"{len(spikes)} grad-norm spikes above 10× the median {median:.3g}",
                           "lower the learning rate or clip gradients harder", _span(records, "grad_norm"),
                           {"median": median, "max": max(spikes)})
    reward = series(records, "reward")
    if len(reward) >= 6:
        peak, end = max(reward), _mean(reward[-3:])
        if peak - end > 0.2 and end < 0.6 * peak:
            return Finding("reward_collapse", "critical", f"reward fell from a peak of {peak:.3f} to {end:.3f}",
                           "lower the learning rate; continue from the checkpoint before the collapse",
                           _span(records, "reward"), {"peak": peak, "end": end})
    return None


def train_eval_divergence(records, comparison: Comparison | None) -> Finding | None:
    reward = series(records, "reward")
    if comparison is None or len(reward) < 4:
        return None
    rise = _mean(reward[-3:]) - _mean(reward[:3])
    if rise > 0.1 and comparison.verdict == "worse":
        return Finding("train_eval_divergence", "critical",
                       f"training reward rose by {rise:+.3f} while validation fell by {comparison.delta:+.3f}",
                       "the policy may be exploiting the reward: inspect completions, tighten the reward",
                       _span(records, "reward"), {"train_rise": rise, "val_delta": comparison.delta})
    return None


def regression(comparison: Comparison | None) -> Finding | None:
    if comparison is not None and comparison.verdict == "worse":
        return Finding("regression", "warning",
                       f"validation {comparison.delta:+.3f} ± {comparison.stderr:.3f} against the parent (paired, "
                       f"n={comparison.n})", "do not extend this node; try other hyperparameters from its parent",
                       values=comparison.to_dict())
    return None


def diagnose(records: list[dict], comparison: Comparison | None = None) -> list[Finding]:
    """All findings for one stage, most severe first."""
    detectors = [entropy_collapse(records), reward_plateau(records), zero_variance_groups(records),
                 kl_blowup(records), length_problems(records), instability(records),
                 train_eval_divergence(records, comparison), regression(comparison)]
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted((f for f in detectors if f is not None), key=lambda f: order[f.severity])
