"""What the LLM is shown, read back from the prompt itself, on hand-built trees.

Each section is checked for what a researcher would look at: every candidate parent's
exact values, score, paired comparison, diagnosis and curves, the diff of an edited
parent, the depth limit and the nodes at it, failures, the noise, the budget; and the
order that lets a provider cache the part that never changes.
"""

import json

import pytest

from autorl.stages import template as templates
from search import study as hpo
from search.context import STATIC_END, ContextBuilder, Noise, PromptView, identical_prefix_share
from search.errors import ProposalError
from search.proposers.llm import LLMProposer, reply_schema
from search.tree import Comparison, Finding, Node, Status, Tree

TEMPLATE = templates.load("arith")
DEFAULTS = TEMPLATE.space.defaults()
DIFF = "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-BATCH_SIZE = 64\n+BATCH_SIZE = 32\n"
COLLAPSE = Finding("entropy_collapse", "critical", "entropy 1.20 -> 0.04 over steps 3-20", "raise the temperature",
                   steps=(3, 20))


def context(max_tokens=6000, hybrid=False, stage_sd=0.012):
    return ContextBuilder(TEMPLATE.program, "beat 70%", TEMPLATE.space, max_tokens=max_tokens,
                          curves=lambda node_id: f"- reward: start 0.41, end 0.63 (curve of {node_id})",
                          train_py=(TEMPLATE.path / "train.py").read_text(),
                          diff=lambda commit: DIFF if commit == "edited" else "",
                          noise=Noise(stage_sd, "5 seeds, stage_spread") if stage_sd else Noise(),
                          max_depth=3, hybrid=hybrid)


def hand_built_tree() -> Tree:
    tree = Tree(base_score=0.535, base_stderr=0.016)
    tree.add(Node("n001", None, 1, {**DEFAULTS, "temperature": 0.96}, seed=1, proposer="llm", commit="root",
                  status=Status.SUCCEEDED, val_score=0.601, val_stderr=0.015, steps=20,
                  comparison=Comparison(0.066, 0.011, 1000, "better"), diagnosis=[COLLAPSE]))
    tree.add(Node("n002", "n001", 2, DEFAULTS, seed=2, proposer="llm", commit="edited", edited=True,
                  status=Status.SUCCEEDED, val_score=0.622, val_stderr=0.015, steps=20, rationale="halve the batch"))
    tree.add(Node("n003", "n002", 3, DEFAULTS, seed=3, proposer="llm", commit="edited", status=Status.SUCCEEDED,
                  val_score=0.650, val_stderr=0.015, steps=20))
    tree.add(Node("n004", "n001", 2, DEFAULTS, seed=4, proposer="llm", commit="root", status=Status.FAILED,
                  reason="the stage crashed: CUDA out of memory"))
    return tree


def user_prompt(tree, view=None, **kwargs) -> str:
    view = view or PromptView(suggested="n002", expandable=[None, "n001", "n002"],
                              budget="3 of 8 stages spent")
    return context(**kwargs).messages(tree, view)[1]["content"]


def block(prompt: str, node_id: str) -> str:
    start = prompt.index(f"## {node_id}")
    end = prompt.find("\n## ", start + 1)
    return prompt[start: end if end > 0 else None]


def test_every_candidate_shows_its_values_score_comparison_diagnosis_and_curves():
    prompt = user_prompt(hand_built_tree())
    first = block(prompt, "n001")
    assert "temperature=0.96" in first  # exact, not rounded to T=1
    assert "validation: 0.601 ± 0.015" in first
    assert "+0.066 ± 0.011 → better, beyond ±0.033" in first  # 2·√(.011² + .012²)
    assert "entropy_collapse (critical): entropy 1.20 -> 0.04 over steps 3-20; try: raise the temperature" in first
    assert "curve of n001" in first and "path: base → n001 (stage 1 of at most 6)" in first
    assert "the tree policy's pick" in block(prompt, "n002") and "curve of n002" in block(prompt, "n002")
    assert "## base" in prompt and "validation 0.535 ± 0.016" in block(prompt, "base")


def test_a_block_says_why_its_node_cannot_be_extended():
    tree = hand_built_tree()
    tree.nodes["n003"].comparison = Comparison(-0.04, 0.01, 1000, "worse")
    assert "at or past the depth limit, worse than its parent: cannot be extended" in user_prompt(tree)
    deep = Node("n005", "n003", 6, DEFAULTS, seed=5, proposer="llm", commit="edited", status=Status.SUCCEEDED,
                val_score=0.7, val_stderr=0.015, steps=20, comparison=Comparison(0.05, 0.01, 1000, "better"))
    tree.add(deep)
    assert "## n005 — best validation so far; at the deepest stage a path may reach: cannot be extended" \
        in user_prompt(tree)


def test_each_stage_is_said_to_start_its_optimizer_and_schedule_afresh():
    assert "only the weights carry over" in user_prompt(hand_built_tree())


def test_a_stage_shows_how_far_it_moved_the_weights_when_that_was_measured():
    tree = hand_built_tree()
    tree.nodes["n002"].weight_drift = 0.0317
    prompt = user_prompt(tree)
    assert "20 GRPO steps; weights moved 3.17% from the stage's start (relative L2)" in block(prompt, "n002")
    assert "weights moved" not in block(prompt, "n003")  # not measured (a checkpoint that was not at hand)


def test_an_edited_parent_shows_its_diff_and_the_tree_a_summary():
    prompt = user_prompt(hand_built_tree())
    assert "```diff\n" + DIFF.strip() + "\n```" in block(prompt, "n002")
    tree_line = next(line for line in prompt.splitlines() if line.startswith("- n002 ← n001"))
    assert "[edited train.py: +1/-1 lines, e.g. `BATCH_SIZE = 32`]" in tree_line
    assert "train.py: the template's\n" in block(prompt, "n001") + "\n"


def test_the_depth_limit_and_the_nodes_at_it_are_named():
    prompt = user_prompt(hand_built_tree())
    assert "Depth: a path holds up to 6 stages; a node at stage 3 or deeper (the depth limit)" in prompt
    assert "not worse (may be extended)" not in prompt
    assert "Expandable: base, n001, n002." in prompt
    assert "[at depth limit]" in next(line for line in prompt.splitlines() if line.startswith("- n003"))


@pytest.mark.parametrize("verdict", ["better", "tie"])
def test_a_path_not_worse_at_the_limit_is_said_to_go_on(verdict):
    tree = hand_built_tree()
    tree.nodes["n003"].comparison = Comparison(0.028, 0.009, 1000, verdict)
    prompt = user_prompt(tree, PromptView("n003", [None, "n001", "n002", "n003"], "3 of 8"))
    assert "At or past the limit and not worse (may be extended): n003." in prompt
    assert "[at or past the depth limit, not worse than its parent]" in next(line for line in prompt.splitlines()
                                                                         if line.startswith("- n003"))
    assert block(prompt, "n003").startswith("## n003 — the tree policy's pick; best validation so far\n")


def test_failures_noise_budget_and_feedback_are_shown():
    view = PromptView(suggested=None, expandable=[None, "n001", "n002"],
                      budget="3 of 8 stages spent", feedback=["your proposal nearly repeats n003"])
    prompt = user_prompt(hand_built_tree(), view)
    assert "- n004 ← n001 (stage 2): failed (the stage crashed: CUDA out of memory)" in prompt
    assert "Budget: 3 of 8 stages spent" in prompt and "The tree policy picks **base**" in prompt
    assert "sd 0.012 (5 seeds, stage_spread)" in prompt and "standard error is about 0.016" in prompt
    assert "# Feedback on your last proposal\n\n- your proposal nearly repeats n003" in prompt
    assert "not measured for this template" in user_prompt(hand_built_tree(), view, stage_sd=None)


def test_the_guard_rule_and_the_strategy_task_are_stated():
    system = context().messages(Tree(), PromptView(None, [None], ""))[0]["content"]
    assert "within 5% of its range" in system
    assert "up to 6 stages; past stage 3 a path goes on only\nwhile each stage is not worse" in system
    hybrid = user_prompt(hand_built_tree(), hybrid=True)
    assert "TPE sampler (seeded by the session) draws one value" in hybrid
    assert "`search`" not in user_prompt(hand_built_tree())


def test_the_part_that_never_changes_comes_first():
    tree = hand_built_tree()
    earlier = Tree(base_score=0.535, base_stderr=0.016)
    prompts = [user_prompt(earlier, PromptView(None, [None], "0 of 8 stages spent")), user_prompt(tree)]
    static = [p[: p.index(STATIC_END)] for p in prompts]
    assert static[0] == static[1] and "GRPOTrainer(" in static[0] and "# Research brief" in static[0]
    assert "n001" not in static[1]
    assert identical_prefix_share(prompts) > 0.6


def test_a_large_tree_fits_the_token_budget_and_keeps_the_pick():
    tree = Tree(base_score=0.5, base_stderr=0.016)
    for i in range(1, 121):
        parent = None if i <= 3 else f"n{(i - 1) // 3:03d}"
        depth = 1 if parent is None else tree.nodes[parent].depth + 1
        tree.add(Node(f"n{i:03d}", parent, depth, DEFAULTS, seed=i, proposer="llm", commit="edited", edited=True,
                      status=Status.SUCCEEDED, val_score=0.5 + i / 1000, val_stderr=0.015, rationale="x" * 2000,
                      diagnosis=[COLLAPSE] * 6))
    view = PromptView(suggested="n002", expandable=[None, "n002", "n120"], budget="120 of 200")
    prompt = user_prompt(tree, view, max_tokens=3000)
    assert len(prompt) <= 3000 * 4
    assert "## n002 — the tree policy's pick" in prompt and "Reply with the JSON object now." in prompt


@pytest.mark.parametrize("hybrid", [False, True])
def test_each_strategy_has_its_own_reply_schema(hybrid):
    schema = reply_schema(TEMPLATE.space, hybrid)
    assert ("search" in schema["properties"]) is hybrid
    assert sorted(schema["required"]) == sorted(schema["properties"])  # strict: every key required


def test_an_llm_reply_with_search_is_refused_by_name(tmp_path):
    from autorl.stages.workspace import Workspace
    from search.llm import LLMClient, LLMSettings

    proposer = LLMProposer(TEMPLATE.space, LLMClient(LLMSettings(model="m", base_url="http://127.0.0.1:9/v1")),
                           context(), hpo.open_study(tmp_path, "s", seed=0), Workspace.create(TEMPLATE, tmp_path / "w"),
                           hybrid=False)
    reply = {"parent": "base", "hyperparameters": DEFAULTS, "edit": [], "rationale": "r", "expected_effect": "",
             "search": []}
    with pytest.raises(ProposalError, match="search: Extra inputs are not permitted"):
        proposer.validate(json.dumps(reply), Tree())


def test_the_session_seed_reaches_the_hybrid_sampler(tmp_path):
    from autorl.stages.workspace import Workspace
    from search.llm import LLMClient, LLMSettings
    from search.proposers.llm import SearchRange

    drawn = []
    for seed in (100, 101):
        proposer = LLMProposer(TEMPLATE.space, LLMClient(LLMSettings(model="m", base_url="http://127.0.0.1:9/v1")),
                               context(hybrid=True), hpo.open_study(tmp_path, f"s{seed}", seed=seed),
                               Workspace.create(TEMPLATE, tmp_path / f"w{seed}"), hybrid=True, seed=seed)
        drawn.append(proposer.sample_ranges([SearchRange(name="learning_rate", low=1e-5, high=1e-4)], None, Tree())[1])
    assert drawn[0] != drawn[1]


def test_feedback_is_forgotten_once_a_later_stage_has_run(tmp_path):
    from autorl.stages.workspace import Workspace
    from search.llm import LLMClient, LLMSettings

    proposer = LLMProposer(TEMPLATE.space, LLMClient(LLMSettings(model="m", base_url="http://127.0.0.1:9/v1")),
                           context(), hpo.open_study(tmp_path, "s", seed=0), Workspace.create(TEMPLATE, tmp_path / "w"),
                           hybrid=False)
    proposer.feedback.append("your proposal nearly repeats n001")
    tree = hand_built_tree()
    proposer.observe(tree, tree.nodes["n001"])
    assert proposer.feedback == []


@pytest.mark.slow
def test_a_session_shows_the_llm_each_scored_stage_s_curves_and_diagnosis(tmp_path, runs_dir):
    """5 stages of `--strategy llm` against the loopback server: the 2nd and 3rd requests carry
    the earlier stages' curve summaries and diagnoses, read from the session's own records;
    the 5th pairs two children of n001 on the validation items they were scored on."""
    from conftest import make_template, run_cli
    from llm_server import LLMServer, ScriptedLLM

    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")

    def reply(parent, temperature):
        return json.dumps({"parent": parent, "hyperparameters": {**DEFAULTS, "temperature": temperature}, "edit": [],
                           "rationale": "test", "expected_effect": "none"})

    llm = ScriptedLLM().add(reply("base", 0.9), reply("n001", 1.1), reply("n002", 0.8), reply("n001", 0.7),
                            reply("n001", 0.6))
    with LLMServer(llm) as server:
        done = run_cli("research", "t", "--template", str(template), "--stages", "5", "--strategy", "llm",
                       "--name", "seen", "--noise-probe", "off",
                       "--llm", "scripted", "--llm-base-url", server.url, "--llm-timeout", "5",
                       env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(run_cli("show", "seen", "--json").stdout)
    assert [n["proposer"] for n in data["nodes"]] == ["llm"] * 5
    assert [n["parent"] for n in data["nodes"]] == [None, "n001", "n002", "n001", "n001"]
    prompts = [request["messages"][1]["content"] for request in llm.requests]
    assert len(prompts) == 5 and "No stage has run yet." in prompts[0]
    assert "# Siblings" not in prompts[3]
    pair = next(line for line in siblings_section(prompts[4]).splitlines() if line.startswith("- n00"))
    assert "(both from n001)" in pair and "paired on " in pair and "they differ in: temperature " in pair
    for later, node, temperature in ((prompts[1], "n001", "0.9"), (prompts[2], "n002", "1.1")):
        shown = block(later, node)
        assert f"- curves of its stage (rollouts at temperature {temperature}):\n  - reward: mean by " in shown
        assert "(first step 0.5, last 0.5;" in shown and "entropy: mean by " in shown
        assert "- diagnosis:\n" in shown and "validation: " in shown
    assert "At the limit now: n003" not in prompts[2] and "temperature=1.1" in block(prompts[2], "n002")


def test_the_example_prompt_in_the_docs_is_what_the_code_renders_now():
    import subprocess
    import sys

    from conftest import REPO

    done = subprocess.run([sys.executable, "scripts/llm_prompt_example.py", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, ("docs/llm-prompt.md is out of date: run scripts/llm_prompt_example.py"
                                  + done.stderr[-2000:])


@pytest.mark.parametrize("max_tokens", [6000, 2500])
def test_stages_in_flight_are_shown_with_why_whatever_the_length(max_tokens):
    tree = hand_built_tree()
    tree.add(Node("n005", "n002", 3, {**DEFAULTS, "temperature": 0.7}, seed=5, proposer="llm", commit="edited",
                  status=Status.RUNNING, rationale="optuna fallback: LLM unavailable (no reply within 60 s)"))
    prompt = user_prompt(tree, max_tokens=max_tokens)
    section = prompt[prompt.index("# Stages in flight (proposed, not scored yet)"): prompt.index("# What has mattered")]
    line = next(line for line in section.splitlines() if line.startswith("- n005"))
    assert line.startswith("- n005 ← n002 (stage 3): running; ") and "temperature=0.7" in line
    assert line.endswith("; proposed because: optuna fallback: LLM unavailable (no reply within 60 s)")
    assert "(5 nodes in all, 3 scored, 1 in flight)" in prompt
    assert sum(line.startswith("- n005") for line in prompt.splitlines()) == 1  # not among the failures too


def test_requests_that_timed_out_are_said_before_the_feedback():
    view = PromptView(suggested="n002", expandable=[None, "n001", "n002"], budget="3 of 8 stages spent",
                      feedback=["a person rejected the proposal"],
                      timeouts=["Your reply to request #2 arrived after 74.0 s, past the 60 s timeout, and was "
                                "discarded (it proposed parent n001 with learning_rate=2e-05); stage n004 was proposed "
                                "by Optuna (TPE) instead."])
    prompt = user_prompt(hand_built_tree(), view)
    assert ("# Your requests that timed out\n\n- Your reply to request #2 arrived after 74.0 s, past the 60 s "
            "timeout") in prompt
    assert prompt.index("# Your requests that timed out") < prompt.index("# Feedback on your last proposal")
    assert "timed out" not in user_prompt(hand_built_tree())


# -- what a researcher reading the prompt needs besides the candidates ------------------------------

def test_the_best_node_and_its_path_show_their_curves_and_diagnosis_even_at_the_depth_limit():
    tree = hand_built_tree()  # n003 (stage 3, at the limit) is the best; its path is n001 → n002 → n003
    tree.nodes["n003"].diagnosis = [Finding("reward_plateau", "info", "reward flat over the second half", "")]
    prompt = user_prompt(tree, PromptView(suggested="n001", expandable=[None, "n001", "n002"], budget="3 of 8"))
    best = block(prompt, "n003")
    assert best.startswith("## n003 — best validation so far; at or past the depth limit, no paired verdict against "
                           "its parent: cannot be extended")
    assert "curve of n003" in best and "reward_plateau (info): reward flat over the second half" in best
    assert block(prompt, "n002").startswith("## n002 — on the best path") and "curve of n002" in block(prompt, "n002")
    assert block(prompt, "n001").startswith("## n001 — the tree policy's pick; on the best path")
    order = [line.split()[1] for line in prompt.split(STATIC_END)[1].splitlines() if line.startswith("## ")]
    assert order == ["n001", "n003", "n002", "base"]  # the pick, the best, its path, then the base model's line
    assert 'A block marked "cannot be extended" is shown for its evidence only.' in prompt


def test_a_tight_budget_drops_lower_nodes_curves_before_the_best_node_s_and_the_newest_stage_s():
    tree = Tree(base_score=0.5, base_stderr=0.016)
    for i in range(1, 31):
        parent = None if i <= 3 else f"n{(i - 1) // 3:03d}"
        depth = 1 if parent is None else tree.nodes[parent].depth + 1
        tree.add(Node(f"n{i:03d}", parent, depth, DEFAULTS, seed=i, proposer="llm", commit="root",
                      status=Status.SUCCEEDED, val_score=0.5 + (0.2 if i == 13 else i / 1000), val_stderr=0.015,
                      rationale="x" * 300))
    expandable = [None] + [n.id for n in tree.scored() if n.depth < 3]
    prompt = user_prompt(tree, PromptView("n002", expandable, "30 of 40"), max_tokens=5000)
    assert len(prompt) <= 5000 * 4
    assert block(prompt, "n013").startswith("## n013 — best validation so far; at or past the depth limit")
    assert "curve of n013" in block(prompt, "n013")
    assert "curve of n030" in block(prompt, "n030")  # the stage that ended last: what just happened, before the pick
    assert "curve of n029" not in prompt  # lower nodes lose their curves (and blocks) first


def test_the_policy_s_pick_comes_with_its_reason_and_base_is_not_advised_forever():
    from search.policy import BestFirstPolicy

    policy = BestFirstPolicy(max_depth=3)
    one_root = Tree(base_score=0.535, base_stderr=0.016)
    one_root.add(Node("n001", None, 1, DEFAULTS, seed=1, proposer="llm", status=Status.SUCCEEDED, val_score=0.60,
                      val_stderr=0.015))
    assert policy.select(one_root, 7, 8) is None
    prompt = user_prompt(one_root, PromptView(None, [None, "n001"], "1 of 8"))
    assert ("The tree policy picks **base**: the session's first 2 stages start from the base model, so that the "
            "search does not bet on one first stage; this says nothing about the base model's score") in prompt
    tree = hand_built_tree()  # the LLM extended n001 instead of starting a second root: base has one child
    pick = policy.select(tree, 5, 8)
    assert pick == "n002"  # the only healthy expandable node (n001 has a critical finding); no longer "base"
    prompt = user_prompt(tree, PromptView(pick, [None, "n001", "n002"], "4 of 8"))
    assert "The tree policy picks **n002**: the best score among the nodes it would extend (UCT:" in prompt
    assert "rule of thumb, not a verdict" in prompt


def test_what_mattered_is_estimated_roughly_from_three_stages_and_says_on_how_many():
    tree = Tree(base_score=0.5, base_stderr=0.016)
    prompt = user_prompt(tree, PromptView(None, [None], "0 of 8"))
    assert "(not yet: 0 scored stages at a depth holding another to compare with;" in prompt
    for i, (rate, score) in enumerate([(1e-5, 0.56), (1e-4, 0.53), (1e-3, 0.20), (3e-5, 0.55)], start=1):
        tree.add(Node(f"n{i:03d}", None, 1, {**DEFAULTS, "learning_rate": rate, "beta": 0.04 if i == 3 else 0.0},
                      seed=i, proposer="llm", status=Status.SUCCEEDED, val_score=score, val_stderr=0.015))
    section = user_prompt(tree, PromptView(None, [None], "4 of 8"))
    section = section[section.index("# What has mattered so far"): section.index("# Candidate parents")]
    assert "A rough early estimate from 4 scored stages (fANOVA's shares need 6)" in section
    assert "- learning_rate: rank correlation -1.00 with the gain (values 1e-05 to 0.001)" in section
    # and what follows is centred on the mean by depth
    assert "by stage depth: stage 1 -0.040 (mean of 4, from -0.300 to +0.060)" in section
    assert "- beta: mean gain +0.087 at 0.0 (3), -0.260 at 0.04 (1)" in section
    assert "read it as a hint, not a finding" in section


def test_the_prompt_gives_validation_by_the_steps_a_path_trained_and_the_best_paths_share_of_the_budget():
    tree = Tree(base_score=0.5, base_stderr=0.016)
    stages = [("n001", None, 1, 0, 20, 0.60), ("n002", None, 1, 0, 20, 0.58), ("n003", "n001", 2, 20, 40, 0.70),
              ("n004", None, 1, 0, 40, 0.66)]
    for node_id, parent, depth, offset, steps, score in stages:
        tree.add(Node(node_id, parent, depth, DEFAULTS, seed=1, proposer="llm", status=Status.SUCCEEDED,
                      val_score=score, val_stderr=0.015, steps=steps, step_offset=offset))
    section = user_prompt(tree, PromptView(None, [None], "120 of 160"))
    section = section[section.index("# What has mattered so far"): section.index("# Candidate parents")]
    assert ("the best node at each total): 20 → 0.600 (n001, best of 2), 40 → 0.660 (n004), 60 → 0.700 (n003). "
            "The best node's path trained 60 of the 120 steps spent; the other 60 trained stages off it.") in section


def test_a_value_that_never_varied_within_a_depth_is_not_read_as_gaining_nothing():
    """Centred per depth, the gains of a value every stage at its depth ran are zero by construction."""
    tree = Tree(base_score=0.5, base_stderr=0.016)
    stages = [("n001", None, 1, 1e-4, 20, 0.60), ("n002", None, 1, 3e-4, 20, 0.55),
              ("n003", "n001", 2, 1e-4, 40, 0.66), ("n004", "n001", 2, 3e-4, 40, 0.61)]
    for node_id, parent, depth, rate, steps, score in stages:
        tree.add(Node(node_id, parent, depth, {**DEFAULTS, "learning_rate": rate, "max_steps": steps}, seed=1,
                      proposer="llm", status=Status.SUCCEEDED, val_score=score, val_stderr=0.015))
    section = user_prompt(tree, PromptView(None, [None], "4 of 8"))
    section = section[section.index("# What has mattered so far"): section.index("# Candidate parents")]
    assert "A rough early estimate from 4 scored stages" in section and "- learning_rate: rank correlation" in section
    assert "max_steps" not in section


def test_the_curves_in_the_prompt_show_means_by_quarter_not_a_slope_against_them():
    from autorl.analysis.curves import curves_text, summarise_curves

    rewards = [0.74, 0.97, 0.99, 0.95, 0.93, 0.9, 0.88, 0.85, 0.83, 0.8, 0.82, 0.91]  # ends above its start, fell
    records = [{"step": i + 1, "reward": r, "entropy": 0.3} for i, r in enumerate(rewards)]
    builder = context()
    builder.curves = lambda node_id: curves_text(summarise_curves(records))
    view = PromptView("n002", [None, "n001", "n002"], "3 of 8")
    shown = block(builder.messages(hand_built_tree(), view)[1]["content"], "n002")
    assert ("- reward: mean by quarter 0.9 → 0.927 → 0.853 → 0.843 (first step 0.74, last 0.91; min 0.74, max 0.99)"
            in shown)
    assert "/step" not in shown and "trend" not in shown
    assert "- curves of its stage (rollouts at temperature 1):" in shown


def test_the_prompt_says_what_wins_what_a_stage_trains_on_and_what_its_curves_measure():
    builder = ContextBuilder(TEMPLATE.program, "beat 70%", TEMPLATE.space, curves=lambda node_id: "",
                             train_py="print()", max_depth=3, train_size=4096, completions_per_step=64,
                             trl_version="1.16.0")
    tree = hand_built_tree()
    user = builder.messages(tree, PromptView("n002", [None, "n001", "n002"], "3 of 8"))[1]["content"]
    static, dynamic = user.split(STATIC_END)
    assert ("each stage's train.py gets 4,096 training prompts (the template's `train_size`, frozen in "
            "env/constants.toml). A stage of `max_steps` steps with `num_generations` completions per prompt uses "
            "max_steps × 64 / num_generations of them") in static
    assert ("TRL 1.16.0 is installed: an edit of train.py may use only the GRPOConfig and GRPOTrainer arguments "
            "that this version has") in static
    assert "measured on its own rollouts, sampled at the stage's own `temperature`" in static
    assert "compare curves across stages only at equal temperatures" in static
    assert ("At the end, the node with the best validation score (ties: the earlier one) is scored once on the test "
            "split, and that is the session's result; the last stages are scored on validation like every other, so "
            "one whose score you never see can still be the result. Now: n003 (0.650 ± 0.015, at the depth "
            "limit).") in dynamic
    assert "no node is scored yet" in builder.messages(Tree(0.5, 0.016), PromptView(None, [None], ""))[1]["content"]


def test_the_hybrid_task_says_tpe_draws_uniformly_during_its_start_up():
    from search.study import N_STARTUP_TRIALS

    static, dynamic = user_prompt(hand_built_tree(), hybrid=True).split(STATIC_END)
    assert "informed by every stage scored so far" not in static
    assert (f"Until the session has {N_STARTUP_TRIALS} scored stages\n(TPE's start-up, `n_startup_trials` = "
            f"{N_STARTUP_TRIALS}) that draw is uniform inside the range") in static
    assert (f"Optuna's TPE has 3 scored stages to learn from: until {N_STARTUP_TRIALS} are scored it draws uniformly "
            "inside your ranges (its start-up).") in dynamic
    assert "Optuna's TPE" not in user_prompt(hand_built_tree())  # the llm strategy samples nothing


def edits_section(prompt: str) -> str:
    start = prompt.index("# What train.py edits did")
    return prompt[start: prompt.index("\n# ", start + 1)]


def test_each_edit_is_shown_against_its_parent_and_a_sibling_without_it():
    tree = hand_built_tree()
    tree.nodes["n002"].comparison = Comparison(0.021, 0.008, 1000, "better")
    tree.add(Node("n005", "n001", 2, {**DEFAULTS, "temperature": 0.7}, seed=5, proposer="llm", commit="root",
                  status=Status.SUCCEEDED, val_score=0.590, val_stderr=0.015, steps=20))
    tree.add(Node("n006", "n002", 3, DEFAULTS, seed=6, proposer="llm", commit="edited2", edited=True,
                  status=Status.FAILED, reason="train.py crashed: TypeError: unexpected keyword 'warmup_ratio'"))
    section = edits_section(user_prompt(tree))
    n002, n006 = section.splitlines()[2:4]
    assert n002.startswith("- n002 ← n001: edited train.py (+1/-1 lines, e.g. `BATCH_SIZE = 32`)")
    assert "+0.021 ± 0.008 against its parent (better)" in n002
    assert ("+0.032 against n005, a sibling with the parent's train.py (val 0.590), which also differs in "
            f"temperature {DEFAULTS['temperature']:.3g} vs 0.7: the gap is not the edit's alone") in n002
    assert n006.startswith("- n006 ← n002: edited train.py") and "failed (train.py crashed: TypeError" in n006


def test_no_edit_yet_is_said():
    tree = hand_built_tree()
    tree.nodes["n002"].edited = False
    assert "No stage has edited train.py yet" in edits_section(user_prompt(tree))


def test_the_trainer_options_an_edit_can_set_are_the_installed_ones_train_py_leaves_alone():
    from importlib import metadata

    from autorl.trainer_options import edit_options_text, installed_options

    options = installed_options()
    assert options["lr_scheduler_type"].default == "'linear'" and options["num_iterations"].default == "1"
    assert options["learning_rate"].default == "1e-06"  # GRPOConfig's own default, not TrainingArguments'
    train_py = (TEMPLATE.path / "train.py").read_text()
    text = edit_options_text(train_py, options)
    assert "`lr_scheduler_type` = 'linear': The learning rate scheduler type to use." in text
    assert "- `learning_rate`" not in text and "`num_iterations` = 1" in text  # train.py passes the first
    assert "warmup_ratio" not in text or "warmup_ratio" in options  # only what this version has
    epsilon = next(line for line in text.splitlines() if line.startswith("  - `epsilon` ="))
    assert "inert while each batch of completions trains one optimizer step once" in epsilon  # the ratio is 1
    prompt = ContextBuilder(TEMPLATE.program, "t", TEMPLATE.space, curves=lambda n: "", train_py=train_py,
                            trl_version=metadata.version("trl"), edit_options=text).static(Tree())
    assert "Trainer options train.py leaves at their defaults" in prompt and "`epsilon_high` = None" in prompt


def test_when_one_curve_fits_it_is_the_best_node_s_not_the_pick_s():
    tree = hand_built_tree()  # n003 is the best; the pick is n001
    view = PromptView(suggested="n001", expandable=[None, "n001", "n002"], budget="3 of 8")
    prompts = (user_prompt(tree, view, max_tokens=tokens) for tokens in range(6000, 1000, -50))
    prompt = next(p for p in prompts if p.count("- curves of its stage") == 1)
    assert "curve of n003" in block(prompt, "n003") and "curve of n001" not in prompt


def test_the_space_states_each_near_repeat_band_in_the_parameter_s_units():
    prompt = user_prompt(hand_built_tree())
    lr = next(line for line in prompt.splitlines() if line.startswith("- `learning_rate`"))
    assert "(log scale); near-repeat band ×" in lr
    temperature = next(line for line in prompt.splitlines() if line.startswith("- `temperature`"))
    assert "near-repeat band ±" in temperature


def siblings_section(prompt: str) -> str:
    start = prompt.index("# Siblings: children of one parent, paired")
    return prompt[start: prompt.index("\n# ", start + 1)]


def test_two_children_of_one_parent_are_compared_paired_with_what_differs():
    tree = hand_built_tree()
    tree.add(Node("n005", "n001", 2, {**DEFAULTS, "temperature": 0.7}, seed=5, proposer="llm", commit="root",
                  status=Status.SUCCEEDED, val_score=0.590, val_stderr=0.015, steps=20))
    asked = []

    def pair(a, b):
        asked.append((a, b))
        return Comparison(0.031, 0.008, 1000, "better")

    builder = context()
    builder.pair = pair
    view = PromptView(suggested="n002", expandable=[None, "n001", "n002"], budget="4 of 8 stages spent")
    section = siblings_section(builder.messages(tree, view)[1]["content"])
    assert asked == [("n002", "n005")]  # the better sibling first, asked once whatever the prompt's shape
    line = section.splitlines()[-1]
    # each sibling carries its own training noise: 2·√(0.008² + (√2·0.012)²) = 0.038
    assert line.startswith("- n002 − n005 (both from n001): +0.031 ± 0.008 paired on 1000 items → tie (beyond ±0.038)")
    assert f"temperature {DEFAULTS['temperature']:.3g} vs 0.7" in line
    assert "train.py edited (+1/-1 lines, e.g. `BATCH_SIZE = 32`) vs the parent's" in line  # which edit, not only one


def test_two_edited_siblings_say_which_edit_each_made():
    from search.siblings import differences

    a = Node("n002", "n001", 2, DEFAULTS, seed=2, proposer="llm", commit="c2", edited=True)
    b = Node("n003", "n001", 2, DEFAULTS, seed=3, proposer="llm", commit="c3", edited=True)
    diffs = {"c2": DIFF, "c3": DIFF.replace("32", "16")}
    builder = context()
    builder.diff = lambda commit: diffs[commit]
    assert differences(a, b, builder.script_of) == ("train.py edited (+1/-1 lines, e.g. `BATCH_SIZE = 32`) vs "
                                                    "edited (+1/-1 lines, e.g. `BATCH_SIZE = 16`)")
    assert differences(a, b) == "train.py edited by its proposal vs edited by its proposal"
    diffs["c3"] = DIFF  # each stage commits its own edit: two commits, one file
    assert differences(a, b, builder.script_of, builder.same_script) == (
        "nothing (the same values and train.py: the gap is training noise)")
    b.hyperparameters = {**DEFAULTS, "temperature": 0.7}
    assert differences(a, b, builder.script_of, builder.same_script) == (
        f"temperature {DEFAULTS['temperature']:.3g} vs 0.7 (train.py: the same edit in both)")


def test_no_siblings_section_without_two_scored_children_of_one_parent():
    prompt = user_prompt(hand_built_tree())  # n001's other child failed
    assert "# Siblings" not in prompt


def test_siblings_are_paired_on_the_items_both_were_scored_on(tmp_path):
    from autorl.session import pair_on_items

    for node_id, correct in (("n002", [1, 1, 0, 1] * 50), ("n005", [1, 0, 0, 1] * 50)):
        (tmp_path / node_id).mkdir()
        items = [{"id": str(i), "correct": c} for i, c in enumerate(correct)]
        (tmp_path / node_id / "eval_validation.json").write_text(json.dumps({"items": items}))
    pair = pair_on_items(tmp_path)
    comparison = pair("n002", "n005")
    assert comparison.n == 200 and comparison.delta == pytest.approx(0.25)
    assert pair("n002", "n009") is None  # not scored here: the prompt says unpaired


def test_a_finding_every_stage_shows_is_said_once_above_the_blocks():
    clipping = Finding("grad_clipping", "info", "clipped on 90% of steps", "nothing needed")
    tree = hand_built_tree()
    tree.nodes["n001"].diagnosis = [COLLAPSE, clipping]
    for node_id in ("n002", "n003"):
        tree.nodes[node_id].diagnosis = [clipping]
    prompt = user_prompt(tree)
    assert prompt.count("clipped on 90% of steps") == 1
    assert "- grad_clipping (info) on all 3 scored stages; at n003: clipped on 90% of steps" in prompt
    assert "entropy_collapse (critical)" in block(prompt, "n001") and "grad_clipping" not in block(prompt, "n001")
    assert "nothing beyond what every stage shows" in block(prompt, "n002")
    tree.nodes["n002"].diagnosis = []  # no longer on every stage: back in each block that has it
    prompt = user_prompt(tree)
    assert "grad_clipping (info): clipped on 90% of steps" in block(prompt, "n001")
    assert "Every scored stage shows" not in prompt


def test_the_learning_rate_limit_is_stated_before_a_proposal_needs_it():
    tree = hand_built_tree()
    assert "Learning-rate limit: none yet (a stage that scores 25% or more below its parent is a collapse" \
        in user_prompt(tree)
    tree.add(Node("n005", "n001", 2, {**DEFAULTS, "learning_rate": 5e-4}, seed=5, proposer="llm", commit="root",
                  status=Status.SUCCEEDED, val_score=0.20, val_stderr=0.013, steps=20))
    line = next(line for line in user_prompt(tree).splitlines() if line.startswith("Learning-rate limit:"))
    assert "n005 collapsed at learning_rate=0.0005 (validation fell from 0.601 to 0.200)" in line
    assert line.endswith("a proposal at or above 0.00035 is sent back.")
