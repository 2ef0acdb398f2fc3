"""Which knobs mattered: the importance of each parameter for a stage's gain over its parent.

The estimator is Optuna's fANOVA (``FanovaImportanceEvaluator``): a random forest fitted to
(values → gain), its variance split by parameter. It takes categorical and log-scaled
parameters as the space defines them, sees interactions, and needs no more stages than a
session runs (it is Optuna's default). The target is the gain over the parent, the same
scale TPE is told, so a late stage from a strong checkpoint and a first stage from the
base model count alike. Stages are few and noisy: below ``MIN_STAGES`` scored stages
there is no estimate, and every number is a share of the variance those stages show.
"""

from __future__ import annotations

import optuna

from search.errors import ProposalError
from search.space import SearchSpace
from search.tree import Tree

MIN_STAGES = 6


def gains(tree: Tree, within_depth: bool = False) -> list[tuple[dict, float]]:
    """(values, validation gain over the parent) of every scored stage whose parent was scored.
    ``within_depth``: each gain less the mean gain of the stages at its depth (stages alone
    at theirs left out), since depth moves the gain whatever the values (a later stage
    usually gains less) and values often change with depth."""
    found = [(node, node.val_score - tree.score_of(node.parent)) for node in tree.scored()
             if tree.score_of(node.parent) is not None]
    if not within_depth:
        return [(node.hyperparameters, gain) for node, gain in found]
    by_depth = gains_by_depth(tree)
    means = {depth: sum(got) / len(got) for depth, got in by_depth.items()}
    return [(node.hyperparameters, gain - means[node.depth]) for node, gain in found
            if len(by_depth[node.depth]) > 1]  # a stage alone at its depth has no one to compare with


def gains_by_depth(tree: Tree) -> dict[int, list[float]]:
    """The gains over the parent of the scored stages, by stage depth."""
    out: dict[int, list[float]] = {}
    for node in tree.scored():
        parent_score = tree.score_of(node.parent)
        if parent_score is not None:
            out.setdefault(node.depth, []).append(node.val_score - parent_score)
    return dict(sorted(out.items()))


def fits(space: SearchSpace, name: str, values: dict) -> bool:
    """Whether a stage's value of ``name`` lies in today's space (an edited or older space may differ)."""
    try:
        space.params[name].check(values[name])
    except (KeyError, ProposalError):
        return False
    return True


def param_importance(tree: Tree, space: SearchSpace, seed: int = 0,
                     within_depth: bool = False) -> dict[str, float] | None:
    """Each parameter's share of the gain's variance (summing to 1, largest first), or None
    while fewer than ``MIN_STAGES`` stages are scored or every stage had the same values."""
    observed = [(values, gain) for values, gain in gains(tree, within_depth)
                if all(fits(space, n, values) for n in space.params)]
    if len(observed) < MIN_STAGES:
        return None
    varied = {name for name in space.params if len({repr(v[name]) for v, _ in observed}) > 1}
    if not varied:
        return None
    distributions = {name: space.params[name].distribution() for name in varied}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    for values, gain in observed:
        study.add_trial(optuna.trial.create_trial(params={n: values[n] for n in varied}, distributions=distributions,
                                                  value=gain))
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    found = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
    return {name: float(share) for name, share in found.items()}


def importance_text(importance: dict[str, float] | None, stages: int) -> str:
    if importance is None:
        return f"(not yet: at least {MIN_STAGES} stages scored against a scored parent are needed)"
    shares = ", ".join(f"{name} {share:.0%}" for name, share in importance.items())
    return (f"Share of the variance of the gain over the parent explained by each parameter (fANOVA over "
            f"{stages} stages; noisy with few stages): {shares}.")
