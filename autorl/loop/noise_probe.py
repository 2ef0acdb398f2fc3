"""The noise probe: where the template declares no seed-to-seed spread and memory brought
no estimate of it, the session trains its first scored stage from the base model once
more, with the same values and ``train.py`` and another seed. The two scores estimate the
spread (``search/seed_noise.py``), which every verdict drawn afterwards counts and the
LLM's prompt states.

One probe per session: it runs once a first unedited stage from the base model has
scored, and only while the budget left holds it and three more such stages (it costs
one stage: in a short session, a large share of the budget for verdicts few stages
use). A person may reject it (``--approve all``) or change its values, which makes it
an ordinary stage; nothing asks again.
"""

from __future__ import annotations

from autorl.config import TREE_STRATEGIES, SessionConfig
from autorl.loop.budget import Budget
from search.proposers import Proposal
from search.seed_noise import Noise
from search.tree import Node, Tree

STAGES_AFTER = 3  # the budget must hold this many stages after the probe: one that no verdict uses is waste


class NoiseProbe:
    def __init__(self, enabled: bool, noise: Noise):
        self.enabled = enabled
        self.noise = noise
        self.declined = False  # a person rejected it in this run

    def proposal(self, tree: Tree, budget: Budget) -> Proposal | None:
        """The repeat to run next, or None (not wanted, done, or not yet possible)."""
        if not self.enabled or self.declined or self.noise.sd(tree) is not None:
            return None
        if any(node.repeat_of for node in tree.nodes.values()):  # tried once (scored, running or failed)
            return None
        original = first_unedited_root(tree)
        if original is None:
            return None
        stages_left, _ = budget.stages_left(original.steps)
        if stages_left is not None and stages_left < 1 + STAGES_AFTER:
            return None
        return Proposal(parent=None, hyperparameters=dict(original.hyperparameters), repeat_of=original.id,
                        rationale=f"a repeat of {original.id} with another training seed, to measure the "
                                  "seed-to-seed spread of a stage (the template declares none)")


def probe_wanted(config: SessionConfig) -> bool:
    """``--noise-probe auto`` under a tree policy. The baselines that run their own line
    (grid, greedy, PBT, random, flat Optuna) would count a stage they did not propose as
    part of it, so they get none."""
    return config.noise_probe == "auto" and config.strategy in TREE_STRATEGIES


def first_unedited_root(tree: Tree) -> Node | None:
    """The first scored stage that started from the base model with the template's train.py."""
    return next((n for n in tree.nodes.values() if n.parent is None and n.scored and not n.edited), None)


def is_repeat(proposal: Proposal, original: Node | None, values: dict) -> bool:
    """Whether a proposal still repeats its original as it will run (a person may have changed its values)."""
    return (original is not None and proposal.parent == original.parent and proposal.train_py is None
            and values == original.hyperparameters)
