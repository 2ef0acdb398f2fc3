"""Seed noise where a template declares none: the probe that repeats a stage with another
seed, the estimate its two scores give, and where it is counted and said."""

import json
import math

import pytest

from autorl.config import SessionConfig
from autorl.loop.budget import Budget
from autorl.loop.noise_probe import NoiseProbe, is_repeat, probe_wanted
from autorl.stages import template as templates
from search.context import ContextBuilder, PromptView
from search.seed_noise import Noise, Repeat, pooled_sd, repeats_in
from search.tree import Comparison, Node, Status, Tree

TEMPLATE = templates.load("arith")
DEFAULTS = TEMPLATE.space.defaults()


def scored(node_id, parent=None, score=0.6, values=None, **extra) -> Node:
    return Node(node_id, parent, 1 if parent is None else 2, dict(values or DEFAULTS), seed=int(node_id[1:]),
                proposer="tree", commit="root", status=Status.SUCCEEDED, val_score=score, val_stderr=0.015, steps=20,
                **extra)


def tree_with(*nodes: Node) -> Tree:
    tree = Tree(base_score=0.5, base_stderr=0.016)
    for node in nodes:
        tree.add(node)
    return tree


def test_two_repeats_estimate_the_spread_pooled_over_their_degrees_of_freedom():
    pairs = [Repeat("n001", "n002", (0.60, 0.64)), Repeat("n005", "n006", (0.70, 0.69))]
    assert pooled_sd(pairs) == pytest.approx(math.sqrt((0.04 ** 2 + 0.01 ** 2) / 4))
    assert pooled_sd(pairs[:1]) == pytest.approx(0.04 / math.sqrt(2))


def test_only_a_scored_repeat_of_a_scored_stage_counts():
    running = Node("n003", None, 1, DEFAULTS, seed=3, proposer="tree", status=Status.RUNNING, repeat_of="n001")
    tree = tree_with(scored("n001", score=0.60), scored("n002", score=0.63, repeat_of="n001"), running)
    assert repeats_in(tree) == [Repeat("n001", "n002", (0.60, 0.63))]
    assert Noise().sd(tree_with(scored("n001"))) is None


def test_a_declared_spread_wins_over_repeats_and_earlier_sessions_count_beside_this_one():
    tree = tree_with(scored("n001", score=0.60), scored("n002", score=0.64, repeat_of="n001"))
    tree.base_stderr = None
    assert Noise(0.014, "5 seeds").sd(tree) == 0.014
    earlier = [Repeat("n001", "n002", (0.70, 0.70), session="yesterday")]
    assert Noise(earlier=earlier).sd(Tree()) == 0.0
    assert Noise(earlier=earlier).sd(tree) == pytest.approx(math.sqrt(0.04 ** 2 / 4))  # no prior without a base SE
    tree.base_stderr = 0.016  # the evaluation's standard error weighs as one more pair
    assert Noise(earlier=earlier).sd(tree) == pytest.approx(math.sqrt((0.016 ** 2 + 0.04 ** 2 / 2) / 3))
    assert "n002 repeats n001 in yesterday: 0.700 vs 0.700" in Noise(earlier=earlier).summary(tree)


def test_the_probe_repeats_the_first_unedited_stage_from_the_base_model_once():
    probe = NoiseProbe(True, Noise(probing=True))
    budget = Budget(max_train_steps=160, spent_train_steps=20)
    assert probe.proposal(Tree(), budget) is None  # nothing scored to repeat yet
    edited = scored("n001", values={**DEFAULTS, "temperature": 0.9}, edited=True)
    tree = tree_with(edited, scored("n002", values={**DEFAULTS, "temperature": 0.8}))
    proposal = probe.proposal(tree, budget)
    assert (proposal.parent, proposal.hyperparameters, proposal.repeat_of) == (None, tree.nodes["n002"].hyperparameters,
                                                                              "n002")
    assert is_repeat(proposal, tree.nodes["n002"], proposal.hyperparameters)
    assert not is_repeat(proposal, tree.nodes["n002"], {**proposal.hyperparameters, "temperature": 1.2})
    tree.add(Node("n003", None, 1, proposal.hyperparameters, seed=3, proposer="tree", status=Status.FAILED,
                  repeat_of="n002"))
    assert probe.proposal(tree, budget) is None  # one try, even a failed one


def test_no_probe_where_the_spread_is_known_or_the_budget_could_not_use_it():
    tree = tree_with(scored("n001"))
    room = Budget(max_train_steps=160, spent_train_steps=20)
    assert NoiseProbe(True, Noise(0.014, "declared")).proposal(tree, room) is None
    assert NoiseProbe(True, Noise(earlier=[Repeat("n1", "n2", (0.5, 0.52), "s")])).proposal(tree, room) is None
    assert NoiseProbe(False, Noise()).proposal(tree, room) is None
    assert NoiseProbe(True, Noise()).proposal(tree, Budget(max_train_steps=160, spent_train_steps=90)) is None
    assert NoiseProbe(True, Noise()).proposal(tree, Budget(max_train_steps=160, spent_train_steps=80)) is not None
    assert NoiseProbe(True, Noise()).proposal(tree, Budget(max_stages=8, spent_stages=5)) is None
    declined = NoiseProbe(True, Noise())
    declined.declined = True
    assert declined.proposal(tree, room) is None


def test_the_probe_runs_under_a_tree_policy_and_not_in_the_baselines_own_lines(tmp_path):
    def config(strategy, mode="auto"):
        llm = {"llm_model": "m", "llm_base_url": "http://127.0.0.1:9/v1"} if strategy in ("llm", "hybrid") else {}
        return SessionConfig(name="s", topic="t", template="arith", strategy=strategy, noise_probe=mode,
                             runs_dir=tmp_path, tracking_uri=f"sqlite:///{tmp_path}/m.db", **llm)

    assert [probe_wanted(config(s)) for s in ("tree", "llm", "hybrid")] == [True] * 3
    assert not any(probe_wanted(config(s)) for s in ("grid", "greedy", "pbt", "random", "optuna"))
    assert not probe_wanted(config("tree", "off"))


def test_a_config_stored_before_the_probe_existed_resumes_without_one(tmp_path):
    from types import SimpleNamespace

    from autorl.storage.records import stored_config

    data = SessionConfig(name="s", topic="t", template="arith", runs_dir=tmp_path,
                         tracking_uri=f"sqlite:///{tmp_path}/m.db").model_dump(mode="json")
    data.pop("noise_probe")
    run = SimpleNamespace(data=SimpleNamespace(tags={"autorl.config": json.dumps(data)}),
                          info=SimpleNamespace(run_id="r"))
    assert stored_config(run).noise_probe == "off"


def prompt_for(tree: Tree, noise: Noise) -> str:
    context = ContextBuilder(TEMPLATE.program, "t", TEMPLATE.space, curves=lambda node_id: "", noise=noise,
                             train_py=(TEMPLATE.path / "train.py").read_text())
    view = PromptView(suggested="n001", expandable=[None, "n001"], budget="2 of 8 stages spent")
    return context.messages(tree, view)[1]["content"]


def test_the_prompt_says_a_probe_is_coming_then_what_it_measured_and_counts_it_in_verdicts():
    noise = Noise(probing=True)
    before = prompt_for(tree_with(scored("n001")), noise)
    assert "This session repeats its first stage from the base model with another seed" in before
    assert "Seed noise measured by repetition" not in before
    child = scored("n003", parent="n001", score=0.65, comparison=Comparison(0.04, 0.01, 1000, "tie", 0.0212))
    tree = tree_with(scored("n001", score=0.60), scored("n002", score=0.63, repeat_of="n001"), child)
    after = prompt_for(tree, noise)
    assert after.split(STATIC_MARK)[0] == before.split(STATIC_MARK)[0]  # the cached prefix holds
    line = next(line for line in after.splitlines() if line.startswith("Seed noise measured by repetition"))
    shrunk = math.sqrt((0.016 ** 2 + 0.03 ** 2 / 2) / 2)  # the base's SE counted as one more pair
    assert (f"n002 repeats n001: 0.630 vs 0.600 → stage sd ≈ {shrunk:.3f} (1 degree of freedom, shrunk toward the "
            "evaluation's standard error 0.016 as if it were one more pair") in line
    assert f"beyond ±{2 * math.hypot(0.01, 0.0212):.3f}" in after  # the margin the verdict was drawn at
    early = scored("n004", parent="n001", score=0.62, comparison=Comparison(0.02, 0.01, 1000, "tie", 0.0))
    tree.add(early)
    line = next(line for line in prompt_for(tree, noise).splitlines() if line.startswith("- n004"))
    assert (f"tie, beyond ±0.020; that verdict was drawn before the seed spread was measured: counted now, "
            f"beyond ±{2 * math.hypot(0.01, shrunk):.3f}, it reads tie)") in line
    tree.nodes["n004"].comparison = Comparison(0.03, 0.01, 1000, "better", 0.0)
    line = next(line for line in prompt_for(tree, noise).splitlines() if line.startswith("- n004"))
    assert "better, beyond ±0.020; that verdict was drawn before the seed spread was measured" in line
    assert f"counted now, beyond ±{2 * math.hypot(0.01, shrunk):.3f}, it reads tie)" in line


STATIC_MARK = "# The template's train.py"


@pytest.mark.slow
def test_a_tree_session_repeats_its_first_stage_and_later_verdicts_count_the_estimate(tmp_path, runs_dir):
    """5 real GRPO stages on arith, 4 steps each: n002 trains n001's values again from the base
    model with another seed; n003's verdict counts the spread the two scores give (with the
    evaluation's standard error as one more pair), and
    `show` says where it came from."""
    from conftest import make_template, run_cli

    template = make_template(tmp_path / "tpl", space={"max_steps": "[4]"})
    done = run_cli("research", "t", "--template", str(template), "--stages", "5", "--strategy", "tree",
                   "--name", "probe", "--seed", "3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "seed noise: not measured yet: a noise probe will train the first stage again" in done.stdout
    shown = run_cli("show", "probe", "--json")
    nodes = {n["id"]: n for n in json.loads(shown.stdout)["nodes"]}
    first, repeat, third = nodes["n001"], nodes["n002"], nodes["n003"]
    assert repeat["repeat_of"] == "n001" and repeat["parent"] is None
    assert repeat["hyperparameters"] == first["hyperparameters"] and repeat["seed"] != first["seed"]
    assert first.get("repeat_of") is None and third.get("repeat_of") is None
    base_se = json.loads(shown.stdout)["base_stderr"]  # counted as one more pair
    estimate = math.sqrt((base_se ** 2 + (first["val_score"] - repeat["val_score"]) ** 2 / 2) / 2)
    assert third["comparison"]["stage_sd"] == pytest.approx(estimate)
    text = run_cli("show", "probe").stdout
    assert f"seed noise: sd {estimate:.3f} of a stage, estimated from 1 repeated stage (n002 repeats n001: " in text
    report = (runs_dir / "sessions" / "probe" / "report" / "report.md").read_text()
    assert f"**Seed noise:** sd {estimate:.3f} of a stage, estimated from 1 repeated stage" in report


@pytest.mark.slow
def test_a_session_killed_while_its_probe_trains_resumes_to_the_tree_it_would_have_grown(fast_template, runs_dir):
    from conftest import run_cli

    args = ["--template", str(fast_template), "--stages", "5", "--seed", "3", "--memory", "off"]  # alike, each alone
    whole = run_cli("research", "t", *args, "--name", "whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    killed = run_cli("research", "t", *args, "--name", "cut", env={"AUTORL_FAULT": "mid_training:2"})
    assert killed.returncode < 0, killed.stdout + killed.stderr
    assert run_cli("resume", "cut").returncode == 0
    nodes = {name: json.loads(run_cli("show", name, "--json").stdout)["nodes"] for name in ("whole", "cut")}
    assert [n["repeat_of"] for n in nodes["cut"]] == [None, "n001", None, None, None]
    shape = {name: [(n["parent"], n["hyperparameters"], n["repeat_of"], n["val_score"]) for n in found]
             for name, found in nodes.items()}
    assert shape["cut"] == shape["whole"]
