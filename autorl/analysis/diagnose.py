"""Diagnosis of a training stage from its curves and its evaluation.

Each detector reads TRL's per-step metrics (``metrics.jsonl``), tolerates missing keys,
and returns a Finding with a name, a severity, evidence (steps and values) and a
suggested direction. The findings go to MLflow with the node and into the context of
the next proposal, so a suggestion names only what a proposal can change: the
hyperparameters of the space, an edit of ``train.py``, or which node to continue from;
never the reward functions, the data or anything else under the frozen ``env/``.

Thresholds on rewards are fractions of the template's reward range (``RewardScale``:
declared as ``[reward] low/high`` in env/constants.toml, else learned from what the
session's stages logged), so a template whose rewards run 0–10 or −1–1 is judged as
one whose rewards run 0–1.25.

Zero-variance groups: TRL's ``frac_reward_zero_std`` compares a group's float32 std
with zero and misses constant groups whose rewards are not exact in binary (thirds,
tenths: their std is ~1e-8). A ``train.py`` that logs ``frac_reward_constant`` (from
the per-completion rewards, with a tolerance; both built-in templates do) is believed
first; otherwise a mean ``reward_std`` below a tolerance of the range means every
group was constant, whatever TRL counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autorl.analysis.curves import series, training_steps
from search.tree import Comparison, Finding

CONSTANT_STD = 1e-6  # a group whose reward std is below this share of the reward range gave no signal


@dataclass
class RewardScale:
    """The width of the reward range that thresholds are fractions of.

    Declared by the template, or the widest spread of rewards the session has seen
    (per-step means and, where logged, four within-group standard deviations), never
    narrower than ``floor`` so a first, flat stage is not judged on noise.
    """

    declared: float | None = None
    seen: float = 0.0
    floor: float = 0.05

    @property
    def width(self) -> float:
        return self.declared if self.declared else max(self.seen, self.floor)

    def learn(self, records: list[dict]) -> None:
        reward, spread = series(records, "reward"), series(records, "reward_std")
        if reward:
            self.seen = max(self.seen, max(reward) - min(reward), 4 * max(spread, default=0.0))


DEFAULT_SCALE = RewardScale(declared=1.0)


def _steps(records: list[dict], key: str) -> list[int]:
    return [int(r.get("step", i)) for i, r in enumerate(training_steps(records))
            if isinstance(r.get(key), (int, float))]


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


def reward_plateau(records, scale: RewardScale = DEFAULT_SCALE, comparison: Comparison | None = None
                   ) -> Finding | None:
    """A flat second half, on a stage that did not gain on validation beyond noise (a stage
    that gained has not plateaued, whatever its tail looks like)."""
    reward = series(records, "reward")
    if len(reward) < 8 or (comparison is not None and comparison.verdict == "better"):
        return None
    tail = _tail(reward)
    gain = _mean(tail[len(tail) // 2:]) - _mean(tail[: len(tail) // 2])
    if abs(gain) < 0.008 * scale.width and max(tail) - min(tail) < 0.12 * scale.width:
        return Finding("reward_plateau", "info",
                       f"reward flat over the second half (≈{_mean(tail):.3f}, change {gain:+.3f})"
                       f"{learning_rate_decay(records)}",
                       "a new stage from another node, or other values from this one; a higher learning rate "
                       "only where a sibling at a higher rate did better",
                       _span(records, "reward"), {"level": _mean(tail), "change": gain})
    return None


def learning_rate_decay(records) -> str:
    """Why a tail may be flat by design: the logged learning rate decayed over the stage."""
    rate = series(records, "learning_rate")
    if len(rate) >= 4 and rate[0] > 0 and rate[-1] < 0.5 * rate[0]:
        return (f"; the learning rate decayed from {rate[0]:.3g} to {rate[-1]:.3g} over the stage, which "
                "flattens any stage's end")
    return ""


def constant_group_fraction(records, scale: RewardScale) -> list[float]:
    """Per step, the share of prompt groups whose completions all got the same reward."""
    if series(records, "frac_reward_constant"):
        return series(records, "frac_reward_constant")
    steps = [r for r in training_steps(records) if isinstance(r.get("frac_reward_zero_std"), (int, float))]
    tolerance = CONSTANT_STD * scale.width
    return [1.0 if isinstance(r.get("reward_std"), (int, float)) and r["reward_std"] <= tolerance
            else float(r["frac_reward_zero_std"]) for r in steps]


def zero_variance_groups(records, scale: RewardScale = DEFAULT_SCALE) -> Finding | None:
    frac = constant_group_fraction(records, scale)
    if len(frac) < 2:
        return None
    tail = _mean(_tail(frac))
    if tail >= 0.6:
        severity = "critical" if tail >= 0.9 else "warning"
        return Finding("zero_variance_groups", severity,
                       f"{tail:.0%} of groups had identical rewards in the second half (no gradient from them)",
                       "larger groups (num_generations) or a higher temperature, for more varied rewards within a "
                       "group",
                       _span(records, "reward"), {"fraction": tail})
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
                       "raise max_completion_length if the space allows it; otherwise a lower temperature",
                       _span(records, "completions/clipped_ratio"), {"clipped_ratio": tail})
    if len(length) >= 4 and length[0] > 0 and _mean(length[-2:]) > 2 * length[0]:
        return Finding("length_explosion", "warning",
                       f"mean completion length grew from {length[0]:.1f} to {_mean(length[-2:]):.1f} tokens",
                       "a lower max_completion_length, temperature or learning rate",
                       _span(records, "completions/mean_length"), {"start": length[0], "end": _mean(length[-2:])})
    return None


def instability(records, scale: RewardScale = DEFAULT_SCALE) -> Finding | None:
    for key in ("loss", "reward", "grad_norm"):
        values = [r.get(key) for r in training_steps(records) if key in r]
        bad = [v for v in values if not isinstance(v, (int, float)) or not math.isfinite(v)]
        if bad:
            return Finding("non_finite", "critical", f"{len(bad)} steps with non-finite {key}",
                           "lower the learning rate; if this node's train.py was edited, undo that edit",
                           _span(records, key), {"key": key})
    return grad_norm_spikes(records) or reward_collapse(records, scale)


SPIKE_RATIO = 4.0  # a spike: this many times the stage's median grad norm …
SPIKE_MADS = 8.0  # … and this many median absolute deviations above it


def grad_norm_spikes(records) -> Finding | None:
    """Steps whose gradient norm (TRL logs it before clipping) stands far above the stage's
    typical one: both a multiple of the median and many median deviations, so a stage whose
    norms merely wander is not flagged."""
    norms = series(records, "grad_norm")
    if len(norms) < 6:
        return None
    steps = list(zip(_steps(records, "grad_norm"), norms))
    median = _median(norms)
    spread = _median([abs(g - median) for g in norms])
    threshold = max(SPIKE_RATIO * max(median, 1e-8), median + SPIKE_MADS * spread)
    spikes = [(step, g) for step, g in steps if g > threshold]
    if not spikes:
        return None
    shown = ", ".join(f"{g:.3g} at step {step}" for step, g in spikes[:4])
    return Finding("grad_norm_spikes", "warning",
                   f"{len(spikes)} grad-norm spike{'s' * (len(spikes) > 1)} ({shown}) against a median of "
                   f"{median:.3g}", "lower the learning rate, or clip gradients harder (max_grad_norm in train.py's "
                   "GRPOConfig)", (spikes[0][0], spikes[-1][0]), {"median": median, "max": max(g for _, g in spikes)})


TRL_MAX_GRAD_NORM = 1.0  # transformers' TrainingArguments default, when a stage does not log its own
CLIPPED_SHARE = 0.5  # clipping on at least this share of steps is worth saying


def grad_clipping(records) -> Finding | None:
    """Most steps' gradients were clipped to ``max_grad_norm``. Under AdamW a gradient scaled
    down by a similar factor at every step changes the update little (Adam divides by the
    gradient's running scale); what clipping does change is the weight of the steps whose
    gradients were largest, which count for less. Information, not a fault."""
    norms, logged = series(records, "grad_norm"), series(records, "max_grad_norm")
    if len(norms) < 4:
        return None
    limit = logged[-1] if logged else TRL_MAX_GRAD_NORM
    if limit <= 0:
        return None
    share = sum(norm > limit for norm in norms) / len(norms)
    if share < CLIPPED_SHARE:
        return None
    source = "logged by the stage" if logged else "TRL's default; the stage did not log its own"
    return Finding("grad_clipping", "info",
                   f"the gradient norm exceeded max_grad_norm = {limit:g} ({source}) on {share:.0%} of steps "
                   f"(median {_median(norms):.3g}): those updates were clipped",
                   "nothing needed for that alone: AdamW normalises a uniformly clipped gradient, so the learning "
                   "rate still sets the step; clipping down-weights the steps with the largest gradients "
                   "(max_grad_norm in train.py's GRPOConfig)", _span(records, "grad_norm"),
                   {"max_grad_norm": limit, "clipped_share": share})


COLLAPSE_SHARE = 0.16  # a collapse loses at least this share of the reward range …
COLLAPSE_NOISE_UNITS = 3.0  # … and at least this many standard deviations of the drop


def step_noise(values: list[float]) -> float:
    """The standard deviation of one step's value around its trend, from successive
    differences (median absolute difference, so one real drop does not inflate it)."""
    steps = sorted(abs(b - a) for a, b in zip(values, values[1:]))
    return steps[len(steps) // 2] / (0.6745 * math.sqrt(2)) if steps else 0.0


def reward_collapse(records, scale: RewardScale = DEFAULT_SCALE) -> Finding | None:
    """The reward where the stage started, or at its best stretch, against its last stretch.

    A per-step reward is the mean over a handful of completions, so one step's peak is
    mostly luck: over 20 noisy steps the highest sits well above the last few although
    nothing collapsed (on recorded stages the single-peak rule fired on 22% of those
    whose validation held or rose: benchmarks/results/reward_collapse_check.md). The
    first step (the starting checkpoint's own completions) and the best window of a
    quarter of the stage are compared with the last window, and the drop must exceed
    both a share of the reward range and the noise of one step against a window's mean.
    """
    reward = series(records, "reward")
    if len(reward) < 6:
        return None
    window = max(3, len(reward) // 4)
    means = [_mean(reward[i:i + window]) for i in range(len(reward) - window + 1)]
    peak, end = max(reward[0], max(means)), means[-1]
    noise = COLLAPSE_NOISE_UNITS * step_noise(reward) * math.sqrt(1 + 1 / window)
    if peak - end > max(COLLAPSE_SHARE * scale.width, noise):
        return Finding("reward_collapse", "critical", f"reward fell from {peak:.3f} to {end:.3f} "
                       f"(mean of the last {window} steps)",
                       "lower the learning rate; continue from this node's parent (the checkpoint before the "
                       "collapse)",
                       _span(records, "reward"), {"peak": peak, "end": end, "window": window})
    return None


# Findings read from the training curves alone; the checkpoint's validation confirms them.
CURVE_ONLY = {"reward_collapse", "length_truncation", "zero_variance_groups"}


def confirmed_by_validation(findings: list[Finding], comparison: Comparison | None) -> list[Finding]:
    """A curve-only finding on a checkpoint that did not lose validation accuracy is a
    warning, not a broken stage: the evaluator has the last word on the checkpoint (the
    finding still steers the stage's children)."""
    if comparison is None or comparison.verdict == "worse":
        return findings
    return [Finding(f.name, "warning", f"{f.evidence}; validation did not fall ({comparison.delta:+.3f} ± "
                    f"{comparison.stderr:.3f})", f.suggestion, f.steps, f.values)
            if f.name in CURVE_ONLY and f.severity == "critical" else f for f in findings]


def train_eval_divergence(records, comparison: Comparison | None, scale: RewardScale = DEFAULT_SCALE
                          ) -> Finding | None:
    """Training reward rose while validation fell against the parent: the policy may exploit the reward.

    The rise is the median of the last stretch (a quarter of the stage, at least 3 steps)
    against the median of the first, so one noisy step at either end does not make it, and it
    must exceed both a share of the reward range and the noise of one step against a stretch.
    """
    reward = series(records, "reward")
    if comparison is None or comparison.verdict != "worse" or len(reward) < 6:
        return None
    window = max(3, len(reward) // 4)
    first, last = _median(reward[:window]), _median(reward[-window:])
    rise = last - first
    noise = COLLAPSE_NOISE_UNITS * step_noise(reward) * math.sqrt(math.pi / window)  # two medians of a window
    if rise > max(0.08 * scale.width, noise):
        return Finding("train_eval_divergence", "critical",
                       f"training reward rose from {first:.3f} to {last:.3f} (medians of the first and last "
                       f"{window} steps) while validation fell by {comparison.delta:+.3f}",
                       "the policy may be exploiting the reward, which cannot be changed: do not extend this node; "
                       "from its parent, try a lower learning rate, a higher beta or fewer steps",
                       _span(records, "reward"), {"train_rise": rise, "val_delta": comparison.delta,
                                                  "window": window})
    return None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def regression(comparison: Comparison | None) -> Finding | None:
    if comparison is not None and comparison.verdict == "worse":
        return Finding("regression", "warning",
                       f"validation {comparison.delta:+.3f} ± {comparison.stderr:.3f} against the parent (paired, "
                       f"n={comparison.n})", "do not extend this node; try other hyperparameters from its parent",
                       values=comparison.to_dict())
    return None


def diagnose(records: list[dict], comparison: Comparison | None = None,
             scale: RewardScale = DEFAULT_SCALE) -> list[Finding]:
    """All findings for one stage, most severe first."""
    detectors = [entropy_collapse(records), reward_plateau(records, scale, comparison),
                 zero_variance_groups(records, scale),
                 kl_blowup(records), length_problems(records), instability(records, scale), grad_clipping(records),
                 train_eval_divergence(records, comparison, scale), regression(comparison)]
    findings = [f for f in detectors if f is not None]
    names = {f.name for f in findings}
    if "kl_blowup" in names and "train_eval_divergence" in names:
        findings = blame_the_kl(findings)
    findings = confirmed_by_validation(findings, comparison)
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order[f.severity])


def blame_the_kl(findings: list[Finding]) -> list[Finding]:
    """Validation fell while KL blew up: the policy drifted away from the reference, and that
    is the cause to steer on (lower the learning rate, raise beta), not reward hacking."""
    divergence = next(f for f in findings if f.name == "train_eval_divergence")
    kept = []
    for finding in findings:
        if finding.name == "train_eval_divergence":
            continue
        if finding.name == "kl_blowup":
            finding = Finding(finding.name, "critical", f"{finding.evidence}; validation fell by "
                              f"{divergence.values.get('val_delta', 0.0):+.3f}", finding.suggestion, finding.steps,
                              {**finding.values, "val_delta": divergence.values.get("val_delta")})
        kept.append(finding)
    return kept
