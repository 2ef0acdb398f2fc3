"""Each pathology is found in a synthetic metric stream; a healthy stream raises none."""

import math

import pytest
from conftest import REPO

from autorl.analysis.diagnose import diagnose
from autorl.analysis.noise import paired_comparison
from autorl.analysis.plots import plot_curves


def stream(n=20, **curves):
    """Records with healthy defaults; each keyword is a function of the step index."""
    healthy = {
        "reward": lambda i: 0.5 + 0.01 * i,
        "entropy": lambda i: 0.30 - 0.002 * i,
        "frac_reward_zero_std": lambda i: 0.2,
        "completions/mean_length": lambda i: 7.0,
        "completions/clipped_ratio": lambda i: 0.0,
        "grad_norm": lambda i: 0.5 + 0.05 * (i % 3),
        "loss": lambda i: 0.01,
    }
    healthy.update(curves)
    return [{"step": i + 1, **{k: f(i) for k, f in healthy.items() if f is not None}} for i in range(n)]


def names(records, comparison=None):
    return [f.name for f in diagnose(records, comparison)]


def items(correct):
    return [{"id": f"{100 + i}+200", "correct": c} for i, c in enumerate(correct)]


def test_healthy_run_raises_nothing():
    assert names(stream()) == []


def test_missing_keys_are_tolerated():
    assert names([{"step": 1, "loss": 0.1}, {"step": 2}]) == []


@pytest.mark.parametrize(("curves", "expected"), [
    ({"entropy": lambda i: 0.3 * 0.7 ** i}, "entropy_collapse"),
    ({"reward": lambda i: 0.6}, "reward_plateau"),
    ({"frac_reward_zero_std": lambda i: 0.95}, "zero_variance_groups"),
    ({"kl": lambda i: 0.001 if i < 10 else 0.5}, "kl_blowup"),
    ({"completions/clipped_ratio": lambda i: 0.8}, "length_truncation"),
    ({"completions/mean_length": lambda i: 7.0 + 2 * i}, "length_explosion"),
    ({"loss": lambda i: math.nan if i == 5 else 0.01}, "non_finite"),
    ({"grad_norm": lambda i: 500.0 if i == 12 else 1.0}, "grad_norm_spikes"),
    ({"grad_norm": lambda i: 1.4 + 0.1 * (i % 3)}, "grad_clipping"),
    ({"reward": lambda i: 0.7 if i < 10 else 0.1}, "reward_collapse"),
])
def test_each_pathology_is_named(curves, expected):
    found = diagnose(stream(**curves))
    assert expected in [f.name for f in found]
    finding = next(f for f in found if f.name == expected)
    assert finding.evidence and finding.suggestion and finding.steps[1] >= finding.steps[0]


def test_regression_and_reward_hacking_need_a_paired_loss():
    parent = items([1] * 600 + [0] * 400)
    worse = items([1] * 500 + [0] * 500)
    comparison = paired_comparison(worse, parent)
    assert comparison.verdict == "worse" and comparison.delta == pytest.approx(-0.1)
    rising = stream(reward=lambda i: 0.3 + 0.03 * i)
    assert {"regression", "train_eval_divergence"} <= set(names(rising, comparison))
    assert names(rising, paired_comparison(parent, parent)) == []


def test_paired_comparison_calls_small_differences_ties():
    parent = items([1, 0] * 500)
    # 30 problems gained and 25 lost: +0.5 points, well inside the paired noise
    child = items([1, 1] * 30 + [0, 0] * 25 + [1, 0] * 445)
    assert paired_comparison(child, parent).verdict == "tie"
    assert paired_comparison(items([1] * 1000), parent).verdict == "better"


def test_plot_is_written(tmp_path):
    assert plot_curves(stream(), tmp_path / "c.png", "n001").stat().st_size > 1000
    assert plot_curves([{"step": 1}], tmp_path / "d.png", "empty") is None


# -- any template: reward scale, constant groups, KL blamed over divergence -----------------

from autorl.analysis.diagnose import RewardScale  # noqa: E402


def scaled(records, factor, offset=0.0):
    """The same run with every reward multiplied by ``factor`` and shifted by ``offset``."""
    return [{**r, "reward": r["reward"] * factor + offset} if "reward" in r else r for r in records]


@pytest.mark.parametrize("curve, finding", [
    ({"reward": lambda i: 0.6 + 0.001 * (i % 2)}, "reward_plateau"),
    ({"reward": lambda i: 0.9 if i < 10 else 0.3}, "reward_collapse"),
])
def test_findings_are_the_same_whatever_the_reward_range(curve, finding):
    records = stream(**curve)
    assert finding in names(records)
    for factor, offset in ((8.0, 0.0), (2.0, -1.0), (0.1, 0.0)):
        scale = RewardScale(declared=factor)
        assert finding in [f.name for f in diagnose(scaled(records, factor, offset), scale=scale)], (factor, offset)


def test_a_learned_scale_follows_what_the_stages_logged():
    scale = RewardScale()
    scale.learn(scaled(stream(), 10.0))
    assert scale.width == pytest.approx(10 * 0.19)
    flat = scaled(stream(reward=lambda i: 0.6 + 0.001 * (i % 2)), 10.0)
    assert "reward_plateau" in [f.name for f in diagnose(flat, scale=scale)]


def test_constant_groups_are_found_when_rewards_are_not_exact_in_binary():
    missed_by_trl = stream(frac_reward_zero_std=lambda i: 0.0, frac_reward_constant=lambda i: 0.8)
    assert "zero_variance_groups" in names(missed_by_trl)
    all_constant = stream(frac_reward_zero_std=lambda i: 0.0, reward_std=lambda i: 1.4e-8)  # float32 std of thirds
    assert "zero_variance_groups" in names(all_constant)


def test_the_templates_count_constant_groups_with_a_tolerance():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("arith_train", Path(__file__).parents[1] / "templates/arith/train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    thirds = [lambda completions, **kw: [1 / 3] * 4 + [0.1, 0.2, 0.3, 0.4], lambda completions, **kw: [0.2] * 8]
    thirds[0].__name__ = "correctness_reward"
    rollouts = train.RolloutStats(thirds, group_size=4)
    for func in rollouts.funcs:
        func(["c"] * 8)
    assert rollouts.take()["frac_reward_constant"] == 0.5 and rollouts.take() == {}
    assert [f.__name__ for f in rollouts.funcs] == ["correctness_reward", "<lambda>"]


def test_a_kl_blowup_that_costs_validation_is_the_critical_finding_not_reward_hacking():
    records = stream(kl=lambda i: 0.001 if i < 10 else 0.5, reward=lambda i: 0.4 + 0.02 * i - (0.1 if i == 12 else 0))
    worse = paired_comparison(items([0] * 50 + [1] * 150), items([1] * 200))
    findings = diagnose(records, worse)
    assert findings[0].name == "kl_blowup" and findings[0].severity == "critical"
    assert "validation fell" in findings[0].evidence
    assert "train_eval_divergence" not in [f.name for f in findings]


# -- reward collapse: noise is not a collapse, and the evaluator has the last word ------------

# Per-step rewards of two recorded 20-step stages (8 completions a step, reward range 1.25):
# one whose validation rose by 4.3 points, one whose validation fell from 0.603 to 0.225.
NOISY_BUT_FINE = [0.703, 0.672, 0.641, 0.625, 0.719, 0.859, 0.641, 0.734, 0.859, 0.656,
                  0.828, 0.672, 0.719, 0.715, 0.641, 0.828, 0.656, 0.57, 0.637, 0.703]
COLLAPSED = [0.83, 0.59, 0.59, 0.45, 0.38, 0.44, 0.56, 0.42, 0.47, 0.58,
             0.31, 0.45, 0.55, 0.38, 0.36, 0.5, 0.41, 0.34, 0.45, 0.44]


def test_a_noisy_peak_is_not_a_reward_collapse():
    scale = RewardScale(declared=1.25)
    assert "reward_collapse" not in [f.name for f in diagnose(stream(reward=NOISY_BUT_FINE.__getitem__), scale=scale)]
    found = diagnose(stream(reward=COLLAPSED.__getitem__), scale=scale)
    assert [f.severity for f in found if f.name == "reward_collapse"] == ["critical"]


@pytest.mark.parametrize("curve, finding", [
    ({"reward": lambda i: 0.7 if i < 10 else 0.1}, "reward_collapse"),
    ({"completions/clipped_ratio": lambda i: 0.8}, "length_truncation"),
])
def test_a_curve_finding_whose_checkpoint_held_on_validation_is_only_a_warning(curve, finding):
    records, parent = stream(**curve), items([1, 0] * 500)
    held = {f.name: f for f in diagnose(records, paired_comparison(parent, parent))}
    assert held[finding].severity == "warning" and "validation did not fall" in held[finding].evidence
    fell = {f.name: f for f in diagnose(records, paired_comparison(items([1] * 300 + [0] * 700), parent))}
    assert fell[finding].severity == "critical"


# -- what a diagnosis may suggest, and a rise that is only noise ------------------------------

def test_every_suggestion_is_something_a_proposal_can_change():
    """The reward functions, the prompts and everything under env/ are frozen: a suggestion names
    hyperparameters, an edit of train.py or which node to continue from."""
    streams = [stream(entropy=lambda i: 0.3 * 0.7 ** i), stream(reward=lambda i: 0.6),
               stream(frac_reward_zero_std=lambda i: 0.95), stream(kl=lambda i: 0.001 if i < 10 else 0.5),
               stream(**{"completions/clipped_ratio": lambda i: 0.8}),
               stream(**{"completions/mean_length": lambda i: 7.0 + 2 * i}),
               stream(loss=lambda i: math.nan if i == 5 else 0.01),
               stream(grad_norm=lambda i: 500.0 if i == 12 else 1.0),
               stream(reward=lambda i: 0.7 if i < 10 else 0.1)]
    worse = paired_comparison(items([1] * 500 + [0] * 500), items([1] * 600 + [0] * 400))
    found = [f for s in streams for f in diagnose(s)] + diagnose(stream(reward=lambda i: 0.3 + 0.03 * i), worse)
    assert {f.name for f in found} >= {"entropy_collapse", "reward_plateau", "zero_variance_groups", "kl_blowup",
                                       "length_truncation", "length_explosion", "non_finite", "grad_norm_spikes",
                                       "reward_collapse", "train_eval_divergence", "regression"}
    for finding in found:
        text = finding.suggestion.lower()
        assert not any(word in text for word in ("tighten", "penalis", "reward function", "prompts", "inspect",
                                                  "check for", "env/")), (finding.name, text)
        assert any(word in text for word in ("learning rate", "temperature", "beta", "num_generations", "max_",
                                             "train.py", "parent", "node", "steps", "groups")), (finding.name, text)


def test_a_rise_measured_from_one_noisy_first_step_is_not_reward_hacking():
    worse = paired_comparison(items([1] * 500 + [0] * 500), items([1] * 600 + [0] * 400))
    noisy = [0.55, 0.84, 0.93, 0.86, 0.91, 0.88, 0.93, 0.87, 0.92, 0.89]  # flat but for a low first step
    assert "train_eval_divergence" not in names(stream(n=10, reward=noisy.__getitem__), worse)
    rising = [0.30, 0.36, 0.33, 0.40, 0.45, 0.50, 0.56, 0.60, 0.66, 0.70]
    found = {f.name: f for f in diagnose(stream(n=10, reward=rising.__getitem__), worse)}
    assert "rose from 0.330 to 0.660 (medians of the first and last 3 steps)" in found["train_eval_divergence"].evidence


def test_a_curve_summary_shows_means_by_quarter_where_a_slope_would_contradict_its_ends():
    from autorl.analysis.curves import curves_text, summarise_curves

    rewards = [0.74, 0.97, 0.99, 0.95, 0.93, 0.9, 0.88, 0.85, 0.83, 0.8, 0.82, 0.91]
    text = curves_text(summarise_curves([{"step": i + 1, "reward": r} for i, r in enumerate(rewards)]))
    assert text == ("- reward: mean by quarter 0.9 → 0.927 → 0.853 → 0.843 (first step 0.74, last 0.91; "
                    "min 0.74, max 0.99)")
    three = curves_text(summarise_curves([{"step": i + 1, "kl": v} for i, v in enumerate([0.0, 0.1, 0.2])]))
    assert three.startswith("- kl: mean by third 0 → 0.1 → 0.2")


def test_grad_norm_spikes_are_found_against_the_stage_s_own_median_and_spread():
    typical = [1.8, 2.2, 2.0, 2.4, 1.9, 2.1, 2.3, 1.7, 2.0, 2.2, 10.5, 2.1, 1.9, 10.8, 2.0, 2.2]
    found = {f.name: f for f in diagnose(stream(n=16, grad_norm=typical.__getitem__))}
    assert "2 grad-norm spikes (10.5 at step 11, 10.8 at step 14)" in found["grad_norm_spikes"].evidence
    wandering = [1.0, 3.0, 1.5, 4.0, 0.8, 2.5, 3.5, 1.2, 4.2, 0.9, 2.8, 3.9]  # wide, but no step stands out
    assert "grad_norm_spikes" not in names(stream(n=12, grad_norm=wandering.__getitem__))


def test_clipping_is_judged_against_the_clip_the_stage_logged():
    clipped = {f.name: f for f in diagnose(stream(grad_norm=lambda i: 1.5))}
    assert "max_grad_norm = 1 (TRL's default; the stage did not log its own) on 100% of steps" in \
        clipped["grad_clipping"].evidence
    looser = [{**r, "max_grad_norm": 2.0} for r in stream(grad_norm=lambda i: 1.5)]
    assert "grad_clipping" not in [f.name for f in diagnose(looser)]


def test_a_flat_tail_on_a_stage_that_gained_is_no_plateau_and_a_decayed_rate_is_named():
    parent = items([1] * 500 + [0] * 500)
    flat = stream(reward=lambda i: 0.6, learning_rate=lambda i: 1e-4 * (1 - i / 20))
    assert "reward_plateau" not in names(flat, paired_comparison(items([1] * 700 + [0] * 300), parent))
    found = {f.name: f for f in diagnose(flat, paired_comparison(parent, parent))}
    assert "the learning rate decayed from 0.0001 to 5e-06" in found["reward_plateau"].evidence
    assert "higher learning rate only where a sibling at a higher rate did better" in \
        found["reward_plateau"].suggestion


def test_advice_names_only_moves_the_space_has_left():
    from autorl.analysis.advice import fit_to_space
    from search.space import SearchSpace

    space = SearchSpace.from_toml(REPO / "templates" / "digitsort" / "space.toml")
    values = {**space.defaults(), "num_generations": 16, "max_completion_length": max(
        space.params["max_completion_length"].choices)}
    found = diagnose(stream(frac_reward_zero_std=lambda i: 0.95, **{"completions/clipped_ratio": lambda i: 0.8}))
    fitted = {f.name: f.suggestion for f in fit_to_space(found, space, values, eval_token_cap=12)}
    assert fitted["zero_variance_groups"] == "num_generations is already at its largest (16): raise temperature"
    assert fitted["length_truncation"].startswith(f"max_completion_length is already at its largest "
                                                  f"({values['max_completion_length']}); the evaluator generates "
                                                  "at most 12 tokens ([eval] max_new_tokens)")
    roomy = {f.name: f.suggestion for f in fit_to_space(found, space, space.defaults(), eval_token_cap=None)}
    assert roomy == {f.name: f.suggestion for f in found}


def test_digitsort_logs_its_rollouts_exact_match_beside_the_partial_credit():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "templates/digitsort/train.py"
    spec = importlib.util.spec_from_file_location("digitsort_train", path)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)

    def correctness_reward(completions, **kw):
        return [1.0, 0.5, 0.25, 1.0, 0.0, 1.0, 0.5, 0.5]

    def format_reward(completions, **kw):
        return [0.25] * 8

    rollouts = train.RolloutStats([correctness_reward, format_reward], group_size=4)
    for func in rollouts.funcs:
        func(["c"] * 8)
    assert rollouts.take() == {"frac_reward_constant": 0.0, "exact_match": 3 / 8}
    assert rollouts.take() == {}  # nothing scored since
