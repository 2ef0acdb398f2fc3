"""Tree policy and proposers, on hand-built trees (no training needed)."""

import json

import optuna
import pytest

from autorl.stages import template as templates
from search import study as hpo
from search.policy import BestFirstPolicy
from search.proposers import (
    DefaultsProposer,
    FlatTpeProposer,
    GreedyProposer,
    GridProposer,
    RandomScheduleProposer,
    TpeProposer,
)
from search.tree import Comparison, Finding, Node, Status, Tree


def scored(tree, node_id, parent, score, depth=1):
    node = Node(node_id, parent, depth, {}, seed=0, proposer="test", status=Status.SUCCEEDED, val_score=score,
                val_stderr=0.01)
    return tree.add(node)


def sample_tree():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    scored(tree, "n001", None, 0.6)
    scored(tree, "n002", "n001", 0.7, depth=2)
    scored(tree, "n003", None, 0.55)
    return tree


def test_policy_prefers_high_scores_and_respects_depth():
    tree = sample_tree()
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n002"
    assert BestFirstPolicy(max_depth=2, exploration=0.0).select(tree) == "n001"
    assert BestFirstPolicy(max_depth=1, exploration=0.0).select(tree) is None  # only new first stages
    assert "n002" not in BestFirstPolicy(max_depth=2).candidates(tree)


def test_a_path_still_improving_goes_past_the_depth_limit_up_to_twice_it():
    tree = sample_tree()
    policy = BestFirstPolicy(max_depth=2, exploration=0.0)
    tree.nodes["n002"].comparison = Comparison(0.1, 0.01, 1000, "tie")
    assert "n002" not in policy.candidates(tree)
    tree.nodes["n002"].comparison = Comparison(0.1, 0.01, 1000, "better")  # its stage beat its parent, paired
    assert policy.select(tree) == "n002"
    deepest = scored(tree, "n004", "n002", 0.8, depth=3)
    deepest.comparison = Comparison(0.1, 0.01, 1000, "better")
    assert "n004" in policy.candidates(tree)
    scored(tree, "n005", "n004", 0.9, depth=4).comparison = Comparison(0.1, 0.01, 1000, "better")
    assert "n005" not in policy.candidates(tree)  # twice the limit is the end, improving or not


def test_leaf_width_sends_the_spare_stages_to_another_lineage():
    tree = sample_tree()  # max depth 3: n002 (depth 2) is one stage above the limit
    for i in range(3):
        scored(tree, f"leaf{i}", "n002", 0.69, depth=3)
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n002"  # best-of-many goes on
    assert BestFirstPolicy(max_depth=3, exploration=0.0, leaf_width=3).select(tree) == "n001"  # a second lineage
    assert BestFirstPolicy(max_depth=3, exploration=0.0, leaf_width=4).select(tree) == "n002"
    assert "n001" in BestFirstPolicy(max_depth=2, leaf_width=2).candidates(tree)  # one child of two
    assert "n001" not in BestFirstPolicy(max_depth=2, leaf_width=1).candidates(tree)
    assert "n002" in BestFirstPolicy(max_depth=4, leaf_width=1).candidates(tree)  # only the last level is capped


def test_ties_are_broken_by_the_seed_reproducibly():
    tree = sample_tree()
    tree.nodes["n003"].val_score = 0.6  # n001 and n003: same score, error and visits, depth 1
    tree.nodes["n002"].val_score = 0.5
    picks = {seed: BestFirstPolicy(3, exploration=0.0, seed=seed).select(tree) for seed in range(20)}
    assert set(picks.values()) == {"n001", "n003"}  # the seed decides a tie, both ways
    assert all(BestFirstPolicy(3, exploration=0.0, seed=seed).select(tree) == pick for seed, pick in picks.items())


def test_exploration_bonus_is_in_standard_errors():
    tree = sample_tree()
    tree.nodes["n001"].val_score = 0.695  # within noise of n002 (stderr 0.01)
    for i in range(6):  # many failed children of n002
        tree.add(Node(f"f{i}", "n002", 3, {}, seed=0, proposer="t", status=Status.FAILED))
    assert BestFirstPolicy(max_depth=3, exploration=2.0).select(tree) == "n001"
    tree.nodes["n001"].val_score = 0.60  # ten standard errors behind: exploration does not reach it
    assert BestFirstPolicy(max_depth=3, exploration=2.0).select(tree) == "n002"


def test_policy_starts_fresh_roots_until_min_roots():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    assert BestFirstPolicy(max_depth=3, min_roots=2).select(tree) is None
    scored(tree, "n001", None, 0.9)
    assert BestFirstPolicy(max_depth=3, min_roots=2).select(tree) is None  # a second first stage
    assert BestFirstPolicy(max_depth=3, min_roots=1).select(tree) == "n001"
    assert BestFirstPolicy(max_depth=3, min_roots=2, exploration=0.0).select(tree, 5, 6) is None  # 6 stages: the rule
    small = BestFirstPolicy(max_depth=3, min_roots=2, exploration=0.0)
    assert small.select(tree, 2, 3) == "n001"  # on 3 stages a second root would cost a third of the budget
    assert "first 2 stages start from the base model" not in small.reason(tree, "n001")


def test_diagnosis_keeps_the_policy_off_unhealthy_nodes():
    tree = sample_tree()
    tree.nodes["n002"].diagnosis = [Finding("reward_collapse", "critical")]
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n001"
    tree.nodes["n001"].comparison = Comparison(-0.1, 0.01, 100, "worse")
    assert BestFirstPolicy(max_depth=3, exploration=0.0).select(tree) == "n003"


def test_tree_paths_and_best():
    tree = sample_tree()
    assert [n.id for n in tree.path("n002")] == ["n001", "n002"]
    assert tree.best().id == "n002"
    with pytest.raises(ValueError, match="unknown parent"):
        tree.add(Node("x", "nope", 1, {}, seed=0, proposer="t"))


def run_line(proposer, scores, tree=None):
    """Feed a proposer scores as if each proposal had trained; returns the proposals."""
    tree = tree or Tree(base_score=0.5, base_stderr=0.01)
    proposals = []
    for score in scores:
        proposal = proposer.propose(tree, None)
        proposals.append(proposal)
        parent = tree.nodes.get(proposal.parent) if proposal.parent else None
        node = Node(tree.next_id(), proposal.parent, 1 + (parent.depth if parent else 0), proposal.hyperparameters,
                    seed=0, proposer=proposer.name, status=Status.SUCCEEDED if score is not None else Status.FAILED,
                    val_score=score, val_stderr=0.01)
        tree.add(node)
        proposer.observe(tree, node)
    return proposals, tree


def test_grid_runs_each_point_as_a_constant_schedule_in_seeded_order():
    space = templates.load("arith").space
    points = space.grid_points()
    assert len(points) == 6 and all(p["beta"] == space.defaults()["beta"] for p in points)
    proposals, tree = run_line(GridProposer(space, max_depth=3, seed=1), [0.6, 0.7, 0.65, 0.6])
    assert [p.parent for p in proposals] == [None, "n001", "n002", None]
    assert proposals[0].hyperparameters == proposals[2].hyperparameters != proposals[3].hyperparameters
    again, _ = run_line(GridProposer(space, max_depth=3, seed=1), [0.6, 0.7, 0.65, 0.6])
    assert [p.hyperparameters for p in again] == [p.hyperparameters for p in proposals]


def test_a_failed_stage_ends_its_schedule():
    space = templates.load("arith").space
    proposals, _ = run_line(GridProposer(space, max_depth=3, seed=0), [0.6, None, 0.6])
    assert [p.parent for p in proposals] == [None, "n001", None]


def test_random_schedules_have_random_lengths_within_depth():
    space = templates.load("arith").space
    proposals, tree = run_line(RandomScheduleProposer(space, max_depth=3, seed=3), [0.6] * 12)
    assert max(n.depth for n in tree.nodes.values()) <= 3
    assert {p.parent is None for p in proposals} == {True, False}


def test_the_defaults_control_trains_the_default_stage_down_one_path_past_any_depth_limit():
    space = templates.load("arith").space
    proposals, tree = run_line(DefaultsProposer(space, max_depth=3, seed=0), [0.6, 0.55, 0.7, 0.65, 0.66])
    assert [p.parent for p in proposals] == [None, "n001", "n002", "n003", "n004"]
    assert all(p.hyperparameters == space.defaults() for p in proposals)
    assert max(n.depth for n in tree.nodes.values()) == 5  # a worse stage does not end the line either


def test_the_defaults_control_starts_again_from_the_base_model_after_a_failed_stage_and_after_a_stop():
    space = templates.load("arith").space
    proposals, tree = run_line(DefaultsProposer(space, max_depth=3, seed=0), [0.6, None, 0.6, 0.62])
    assert [p.parent for p in proposals] == [None, "n001", None, "n003"]
    resumed = DefaultsProposer(space, max_depth=3, seed=0)
    resumed.restore(tree, {})
    assert resumed.propose(tree, None).parent == "n004"


def test_flat_optuna_tells_one_trial_per_schedule(tmp_path):
    space = templates.load("arith").space
    study = hpo.open_study(tmp_path, "flat", seed=0)
    proposals, tree = run_line(FlatTpeProposer(space, 3, study), [0.6] * 7)
    roots = sum(p.parent is None for p in proposals)
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(finished) in (roots, roots - 1)  # the last schedule may still be running
    assert all(t.params["stages"] == sum(1 for p in proposals if p.optuna_trial == t.number) for t in finished)


def test_greedy_keeps_improvements_and_discards_the_rest():
    space = templates.load("arith").space
    proposals, tree = run_line(GreedyProposer(space, max_depth=2, seed=0), [0.6, 0.55, 0.7, 0.65, 0.72])
    assert proposals[0].hyperparameters == space.defaults()
    assert [p.parent for p in proposals] == [None, "n001", "n001", "n001", "n001"]
    # n003 (0.7) is kept at depth 2 = the limit: its last stage is retried from n001; n005 beats it
    assert tree.nodes["n003"].kept and not tree.nodes["n002"].kept
    assert tree.nodes["n005"].kept and not tree.nodes["n004"].kept


def test_tpe_tells_gain_over_parent_and_survives_reopen(tmp_path):
    space = templates.load("arith").space
    study = hpo.open_study(tmp_path, "s", seed=0)
    proposer = TpeProposer(space, study)
    tree = Tree(base_score=0.5, base_stderr=0.01)
    proposal = proposer.propose(tree, None)
    assert proposal.hyperparameters == space.defaults()  # the enqueued reference
    node = scored(tree, "n001", None, 0.62)
    node.optuna_trial = proposal.optuna_trial
    proposer.observe(tree, node)
    failed = Node("n002", "n001", 2, {}, seed=0, proposer="optuna", status=Status.FAILED)
    failed.optuna_trial = proposer.propose(tree, "n001").optuna_trial
    tree.add(failed)
    proposer.observe(tree, failed)

    reopened = hpo.open_study(tmp_path, "s", seed=0)
    states = [t.state for t in reopened.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert reopened.trials[0].value == pytest.approx(0.12)
    assert reopened.trials[1].user_attrs == {"parent": "n001", "depth": 2}


@pytest.mark.parametrize("cut_after", [0, 1, 3])
def test_a_trial_a_kill_cut_short_among_its_values_is_proposed_again_whole(tmp_path, cut_after):
    """The study writes each sampled value on its own: a controller killed between two of
    those writes leaves a trial with some values only. Resumed, the proposer must propose
    what the uninterrupted one did, not the cut values mixed with a fresh draw."""
    space = templates.load("arith").space
    tree = Tree(base_score=0.5, base_stderr=0.01)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    uninterrupted = TpeProposer(space, hpo.open_study(tmp_path / "a", "s", seed=0), start_with_defaults=False)
    expected = uninterrupted.propose(tree, None).hyperparameters

    study = hpo.open_study(tmp_path / "b", "s", seed=0)
    TpeProposer(space, study, start_with_defaults=False)
    killed = study.ask()  # the values it had written before the kill:
    for name, param in list(space.params.items())[:cut_after]:
        killed._suggest(name, param.distribution())
    resumed = TpeProposer(space, hpo.open_study(tmp_path / "b", "s", seed=0), start_with_defaults=False)
    resumed.restore(tree, {})
    assert resumed.propose(tree, None).hyperparameters == expected


def test_an_enqueued_trial_a_kill_left_running_is_enqueued_again(tmp_path):
    space = templates.load("arith").space
    study = hpo.open_study(tmp_path, "s", seed=0)
    TpeProposer(space, study)  # enqueues the defaults: the first stage
    study.ask()  # asked, and killed before any value was written
    resumed = TpeProposer(space, hpo.open_study(tmp_path, "s", seed=0))
    resumed.restore(Tree(base_score=0.5), {})
    assert resumed.propose(Tree(base_score=0.5), None).hyperparameters == space.defaults()


# -- one de-duplication for every proposer ----------------------------------------------------

DEDUP_SPACE = templates.load("arith").space


def scored_node(node_id, parent, values, depth=1, **fields):
    return Node(node_id, parent, depth, values, seed=1, proposer="test", status=Status.SUCCEEDED, val_score=0.5,
                val_stderr=0.01, **fields)


def test_a_greedy_mutation_that_repeats_a_sibling_is_drawn_again():
    from search.proposers import Guarded

    tree = Tree(base_score=0.4)
    tree.add(scored_node("n001", None, DEDUP_SPACE.defaults()))
    greedy = GreedyProposer(DEDUP_SPACE, max_depth=3, seed=0)
    greedy.restore(tree, {})
    first = greedy.propose(tree, None)
    tree.add(scored_node("n002", first.parent, first.hyperparameters, depth=2))  # it already ran
    proposal = Guarded(greedy, DEDUP_SPACE).propose(tree, None)
    assert proposal.hyperparameters != first.hyperparameters


def test_a_grid_stage_that_already_exists_is_continued_from_not_run_again():
    from search.proposers import Guarded

    grid = Guarded(GridProposer(DEDUP_SPACE, max_depth=2, seed=0), DEDUP_SPACE)
    tree = Tree(base_score=0.4)
    stage_one = GridProposer(DEDUP_SPACE, max_depth=2, seed=0).propose(tree, None)
    tree.add(scored_node("n001", None, stage_one.hyperparameters))  # e.g. another strategy ran it
    proposal = grid.propose(tree, None)
    assert proposal.parent == "n001" and proposal.rationale.endswith("stage 2 of 2")
    assert grid.usage()["near_duplicates"] == 1


def test_an_edit_is_never_a_duplicate_and_edited_siblings_are_not_repeats():
    from search.novelty import duplicate_of

    tree = Tree(base_score=0.4)
    tree.add(scored_node("n001", None, DEDUP_SPACE.defaults(), edited=True))
    assert duplicate_of(tree, DEDUP_SPACE, None, DEDUP_SPACE.defaults(), same_script=True) is None
    tree.add(scored_node("n002", None, DEDUP_SPACE.defaults()))
    assert duplicate_of(tree, DEDUP_SPACE, None, DEDUP_SPACE.defaults(), same_script=True) == "n002"


def test_a_proposer_that_only_repeats_itself_is_dropped_not_looped():
    from search.proposers import BaseProposer, Guarded, Proposal, ProposalDropped

    class Stuck(BaseProposer):
        name = "stuck"
        heard: list = []

        def propose(self, tree, parent):
            return Proposal(parent=None, hyperparameters=DEDUP_SPACE.defaults())

        def withdraw_duplicate(self, proposal, twin, tree):
            self.heard.append(twin.id)

    tree = Tree(base_score=0.4)
    tree.add(scored_node("n001", None, DEDUP_SPACE.defaults()))
    stuck = Stuck()
    with pytest.raises(ProposalDropped, match=r"failed the checks 4 times in a row \(near-duplicate of n001\)"):
        Guarded(stuck, DEDUP_SPACE).propose(tree, None)
    assert stuck.heard == ["n001"] * 4


# -- PBT -------------------------------------------------------------------------------------

def run_pbt_round(tree, pbt, scores):
    """Propose and 'train' one round: each member's stage gets the next score (None: failed)."""
    for score in scores:
        proposal = pbt.propose(tree, None)
        node_id = f"n{len(tree.nodes) + 1:03d}"
        depth = 1 if proposal.parent is None else tree.nodes[proposal.parent].depth + 1
        status = Status.SUCCEEDED if score is not None else Status.FAILED
        tree.add(Node(node_id, proposal.parent, depth, proposal.hyperparameters, seed=1, proposer="pbt",
                      status=status, val_score=score, val_stderr=0.01 if score is not None else None))
        pbt.observe(tree, tree.nodes[node_id])


def test_pbt_members_continue_and_the_worst_exploit_the_best():
    from search.proposers import PbtProposer

    tree, pbt = Tree(base_score=0.5), PbtProposer(DEDUP_SPACE, size=4, seed=0)
    run_pbt_round(tree, pbt, [0.55, 0.70, 0.40, 0.60])  # round 1: n001..n004 from the base model
    assert [n.parent for n in tree.nodes.values()] == [None] * 4
    assert tree.nodes["n001"].hyperparameters == DEDUP_SPACE.defaults()
    run_pbt_round(tree, pbt, [0.6, 0.7, 0.5, 0.6])  # round 2
    parents = [tree.nodes[f"n00{i}"].parent for i in range(5, 9)]
    assert parents[:2] == ["n001", "n002"] and parents[3] == "n004"  # the others continue their own line
    assert parents[2] == "n002"  # the worst (n003, 0.40) exploits the best (n002)
    assert tree.nodes["n007"].hyperparameters != tree.nodes["n002"].hyperparameters  # … and explores


def test_pbt_replays_its_population_after_a_resume():
    from search.proposers import PbtProposer

    tree, pbt = Tree(base_score=0.5), PbtProposer(DEDUP_SPACE, size=4, seed=3)
    run_pbt_round(tree, pbt, [0.55, 0.70, None, 0.60])
    resumed = PbtProposer(DEDUP_SPACE, size=4, seed=3)
    resumed.restore(tree, {})
    assert resumed.propose(tree, None) == pbt.propose(tree, None)


# -- memory of collapses -----------------------------------------------------------------------

def collapsed_tree():
    tree = Tree(base_score=0.53)
    tree.add(scored_node("n001", None, DEDUP_SPACE.defaults() | {"learning_rate": 5e-5}))
    tree.nodes["n001"].val_score = 0.59
    tree.add(Node("n002", None, 1, DEDUP_SPACE.defaults() | {"learning_rate": 9.4e-4}, seed=2, proposer="tree",
                  status=Status.SUCCEEDED, val_score=0.11, val_stderr=0.01))
    return tree


def test_one_collapse_sets_a_learning_rate_limit_with_its_evidence():
    from search.memory import learning_rate_limit

    limit = learning_rate_limit(collapsed_tree(), DEDUP_SPACE)
    assert limit.name == "learning_rate" and limit.value == pytest.approx(9.4e-4 * 0.7)
    assert "n002 collapsed at learning_rate=0.00094 (validation fell from 0.530 to 0.110)" in limit.evidence
    assert learning_rate_limit(Tree(base_score=0.5), DEDUP_SPACE) is None


def test_tpe_samples_below_a_collapse_anywhere_in_the_tree(tmp_path):
    tree = collapsed_tree()
    proposer = TpeProposer(DEDUP_SPACE, hpo.open_study(tmp_path, "memory", seed=0), start_with_defaults=False)
    for node in tree.nodes.values():
        proposer.observe(tree, node)
    rates = [proposer.propose(tree, "n001").hyperparameters["learning_rate"] for _ in range(12)]
    assert max(rates) < 9.4e-4 * 0.7


def test_the_guard_sends_a_known_failure_back_but_leaves_baselines_alone():
    from search.proposers import BaseProposer, Guarded, Proposal

    class Reckless(BaseProposer):
        name = "reckless"

        def __init__(self):
            self.heard, self.rate = [], 8e-4

        def propose(self, tree, parent):
            return Proposal(parent="n001", hyperparameters=DEDUP_SPACE.defaults() | {"learning_rate": self.rate})

        def withdraw_failure(self, proposal, evidence):
            self.heard.append(evidence)
            self.rate = 1e-4

    guarded = Guarded(Reckless(), DEDUP_SPACE)
    assert guarded.propose(collapsed_tree(), None).hyperparameters["learning_rate"] == 1e-4
    assert "n002 collapsed" in guarded.inner.heard[0] and guarded.usage()["known_failures_refused"] == 1
    baseline = Guarded(Reckless(), DEDUP_SPACE, remember=False)
    assert baseline.propose(collapsed_tree(), None).hyperparameters["learning_rate"] == 8e-4


# -- budget-aware policy --------------------------------------------------------------------------

def test_the_last_stage_is_not_spent_on_a_fresh_root_and_exploration_fades():
    policy = BestFirstPolicy(max_depth=3, seed=0, min_roots=1)
    tree = Tree(base_score=0.5, base_stderr=0.02)
    tree.add(scored_node("n001", None, DEDUP_SPACE.defaults()))
    tree.nodes["n001"].val_score = 0.45  # below the base: early on, a fresh root is worth a try
    assert policy.select(tree, stages_left=8, stages=8) is None
    assert policy.select(tree, stages_left=1, stages=8) == "n001"
    assert policy.value(tree, "n001", share_left=0.0) == 0.45
    unaware = BestFirstPolicy(max_depth=3, seed=0, min_roots=1, budget_aware=False)  # --ablate budget
    assert unaware.select(tree, stages_left=1, stages=8) is None


def test_a_collapse_at_the_smallest_steps_sets_no_limit_that_would_forbid_the_space():
    from search.memory import learning_rate_limit
    from search.tree import Finding

    tree = Tree(base_score=0.53)
    low = DEDUP_SPACE.params["learning_rate"].low
    tree.add(Node("n001", None, 1, DEDUP_SPACE.defaults() | {"learning_rate": low * 1.3}, seed=1, proposer="tree",
                  status=Status.SUCCEEDED, val_score=0.56, val_stderr=0.01,
                  diagnosis=[Finding("reward_collapse", "critical")]))
    assert learning_rate_limit(tree, DEDUP_SPACE) is None
    # a larger step that collapsed still sets the limit, whatever the small one did
    tree.add(Node("n002", None, 1, DEDUP_SPACE.defaults() | {"learning_rate": 8e-4}, seed=2, proposer="tree",
                  status=Status.SUCCEEDED, val_score=0.10, val_stderr=0.01))
    limit = learning_rate_limit(tree, DEDUP_SPACE)
    assert limit is not None and limit.value == pytest.approx(8e-4 * 0.7) and "n002" in limit.evidence


def test_a_budget_larger_than_the_grid_refines_it_instead_of_repeating_it():
    from search.proposers import GridProposer

    space = templates.load("arith").space
    grid = GridProposer(space, max_depth=3, seed=0)
    first = [grid.draw(i)[0] for i in range(1, 7)]
    finer = [grid.draw(i)[0] for i in range(7, 11)]
    rates = {p["learning_rate"] for p in first}
    assert rates == {2e-5, 1e-4, 4e-4}
    assert {p["learning_rate"] for p in finer} == {4.47e-05, 2e-4}  # geometric midpoints
    assert all(p not in first for p in finer) and len({json.dumps(p, sort_keys=True) for p in finer}) == 4


def test_the_journal_lock_dies_with_a_killed_writer(tmp_path):
    """A controller SIGKILLed while it writes to the study must not leave the lock held:
    Optuna's own lock files outlive the kill and make the resume wait 30 s to take them over."""
    import fcntl
    import os
    import signal

    storage = hpo.open_storage(tmp_path)
    lock = storage._backend._lock
    assert isinstance(lock, hpo.FlockLock)
    pid = os.fork()
    if pid == 0:  # the writer: takes the lock, then is killed holding it
        hpo.open_storage(tmp_path)._backend._lock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    with lock.path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if still held


# -- the fresh-roots rule under a proposer that chooses its own parent (the LLM) ---------------------------

def test_the_fresh_roots_rule_does_not_advise_base_forever_once_another_parent_was_chosen():
    """An LLM that extended the first stage instead of starting a second one was told "base" at every
    later proposal: the rule counted the base model's children, and the LLM never added one."""
    tree = Tree(base_score=0.5, base_stderr=0.01)
    scored(tree, "n001", None, 0.6)
    scored(tree, "n002", "n001", 0.7, depth=2)
    scored(tree, "n003", "n002", 0.72, depth=3)
    policy = BestFirstPolicy(max_depth=3, min_roots=2)
    assert policy.select(tree, stages_left=5, stages=8) == "n002"  # base (0.5) is the worst node
    assert "first 2 stages" not in policy.reason(tree, "n002") and "best score" in policy.reason(tree, "n002")
    first = Tree(base_score=0.5, base_stderr=0.01)
    scored(first, "n001", None, 0.6)
    assert policy.select(first, stages_left=7, stages=8) is None  # the rule itself still holds at the start
    assert "says nothing about the base model's score" in policy.reason(first, None)


def test_the_fresh_roots_rule_never_spends_the_last_stage_on_a_root():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    scored(tree, "n001", None, 0.6)
    assert BestFirstPolicy(max_depth=3, min_roots=2).select(tree, stages_left=1, stages=8) == "n001"


# -- which nodes may still be a parent (retention keeps their checkpoints) ---------------------------

def test_the_policy_can_never_reach_a_node_whose_largest_bonus_stays_below_a_lasting_candidate():
    tree = Tree(base_score=0.5, base_stderr=0.01)
    scored(tree, "n001", None, 0.70)
    scored(tree, "n002", None, 0.69)  # within a bonus of the leader
    scored(tree, "n003", None, 0.40)  # 30 points below: no bonus in 40 nodes reaches 0.70
    scored(tree, "n004", "n001", 0.71, depth=2)  # at the depth limit: never a candidate
    policy = BestFirstPolicy(max_depth=2)
    assert policy.reachable(tree, max_nodes=40) == {"n001", "n002"}
    assert policy.reachable(tree, max_nodes=None) == {"n001", "n002", "n003"}  # no cap: any bonus may come
    for _ in range(30):  # and it never picks n003 while the session grows to 40 nodes
        pick = policy.select(tree)
        assert pick != "n003"
        scored(tree, tree.next_id(), pick, 0.65, depth=1 if pick is None else tree.nodes[pick].depth + 1)


def test_each_baseline_names_the_nodes_it_may_still_extend(tmp_path):
    space = templates.load("arith").space
    greedy = GreedyProposer(space, max_depth=2, seed=0)
    _, tree = run_line(greedy, [0.6, 0.55, 0.7])  # n003 (depth 2) is the incumbent: its next stage retries from n001
    assert greedy.parents(tree) == {"n003", "n001"}
    grid = GridProposer(space, max_depth=3, seed=1)
    _, tree = run_line(grid, [0.6])
    assert grid.parents(tree) == {"n001"}  # its schedule goes on from its tip
    _, tree = run_line(grid, [0.7, 0.65], tree)
    assert grid.parents(tree) == set()  # the schedule ended; the next starts from the base model
    assert TpeProposer(space, hpo.open_study(tmp_path, "s", 0)).parents(tree) is None  # the tree policy decides


def test_pbt_may_extend_only_its_last_two_rounds():
    from search.proposers import PbtProposer

    tree, pbt = Tree(base_score=0.5), PbtProposer(DEDUP_SPACE, size=4, seed=0)
    run_pbt_round(tree, pbt, [0.55, 0.70, 0.40, 0.60])
    run_pbt_round(tree, pbt, [0.6, 0.7, 0.5, 0.6])
    run_pbt_round(tree, pbt, [0.6, 0.7])  # half of round 3
    assert pbt.parents(tree) == {f"n{i:03d}" for i in range(5, 11)}
