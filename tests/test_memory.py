"""Memory across sessions: a session reads what earlier sessions in its store measured on
the same template (same frozen files and space), from any strategy; the LLM as a section
of its prompt, TPE as a warm start; `--memory off` reads nothing, another template's
sessions are never read, and a resume knows what the session knew when it started."""

import json

import optuna
import pytest
from conftest import make_template, narrow_space, run_cli
from llm_server import LLMServer, ScriptedLLM

from autorl.stages import template as templates
from autorl.storage.earlier_sessions import Memory, template_fingerprint
from search.earlier import MEMORY_ATTR, EarlierSession, memory_text, memory_trials, warm_start
from search.study import open_study
from search.tree import Comparison, Finding, Node, Status, Tree

SPACE = templates.load("arith").space
DEFAULTS = SPACE.defaults()


def stage(node_id, parent, depth, score, lr, verdict="tie", delta=0.0, **extra) -> Node:
    return Node(node_id, parent, depth, {**DEFAULTS, "learning_rate": lr}, seed=1, proposer="tree",
                status=Status.SUCCEEDED, val_score=score, val_stderr=0.01,
                comparison=Comparison(delta, 0.012, 64, verdict), **extra)


def earlier(name="alpha") -> EarlierSession:
    tree = Tree(base_score=0.50, base_stderr=0.01)
    tree.add(stage("n001", None, 1, 0.60, 1e-4, "better", 0.10))
    tree.add(stage("n002", "n001", 2, 0.66, 5e-5, "better", 0.06, edited=True))
    tree.add(stage("n003", None, 1, 0.20, 9e-4, "worse", -0.30,
                   diagnosis=[Finding("reward_collapse", "critical", "reward fell to 0")]))
    failed = Node("n004", "n002", 3, {**DEFAULTS}, seed=1, proposer="tree", status=Status.FAILED, reason="oom")
    tree.add(failed)
    return EarlierSession(name, "tree", tree, test_score=0.64, test_stderr=0.02,
                          diffs={"n002": "--- a\n+++ b\n-    warmup_steps=0\n+    warmup_steps=4\n"})


def test_the_prompt_section_names_each_stage_by_session_and_node_with_its_noise():
    text = memory_text([earlier()], SPACE)
    assert "1 earlier session on this template (3 scored stages)" in text
    assert "- alpha (tree, 3 stages scored): base 0.500; best validation 0.660 ± 0.010 at alpha/n002 (stage 2)" \
           ", test 0.640 ± 0.020" in text
    assert "alpha/n001 (stage 1, from base): " in text and "+0.100 ± 0.012 against its parent, better" in text
    assert "alpha/n003 (stage 1, from base)" in text.split("Largest losses:")[1]  # the loss, paired
    assert "alpha/n002 (+1/-1 lines, e.g. `warmup_steps=4`): +0.060 ± 0.012 against its parent" in text  # the edit
    assert "- alpha/n003: " in text.split("## Collapses")[1]  # the collapse and its values
    assert "alpha/n004" not in text.split("## Best schedules")[1].split("## Collapses")[0]  # failed: not a gain
    assert "## What went with the gain" in text and memory_text([], SPACE) == ""


def test_an_earlier_session_with_this_session_s_seed_is_said_to_reproduce_its_stages():
    same, other = earlier("alpha"), earlier("beta")
    same.seed, other.seed = 7, 8
    text = memory_text([same, other], SPACE, seed=7)
    assert "alpha ran with this session's --seed: its stage nK trained with the seed this session's nK gets" in text
    assert "- alpha (tree, 3 stages scored, the same --seed as this session)" in text
    assert "- beta (tree, 3 stages scored):" in text
    assert "They ran other seeds" in memory_text([other], SPACE, seed=7)


def test_a_stage_that_changed_many_values_says_it_cannot_credit_one_and_values_read_in_three_figures():
    session = earlier()
    session.tree.add(Node("n005", "n001", 2, {**DEFAULTS, "learning_rate": 1.2345678e-4, "temperature": 0.61234,
                                              "beta": 0.04}, seed=1, proposer="tree", status=Status.SUCCEEDED,
                          val_score=0.70, val_stderr=0.01, steps=20, comparison=Comparison(0.1, 0.012, 64, "better")))
    text = memory_text([session], SPACE)
    line = next(line for line in text.splitlines() if line.startswith("- alpha/n005 (stage 2"))
    assert "learning_rate 0.0001 -> 0.000123" in line and "temperature " in line and "-> 0.612" in line
    assert "(3 values changed at once: the stage cannot credit one of them)" in line
    assert "- alpha (tree, 4 stages scored, 20 training steps in all)" in text


def test_each_earlier_stage_warm_starts_the_study_once(tmp_path):
    trials = memory_trials([earlier()], SPACE)
    assert [(t["label"], round(t["value"], 3)) for t in trials] == [
        ("alpha/n001", 0.1), ("alpha/n002", 0.06), ("alpha/n003", -0.3)]
    study = open_study(tmp_path, "s", seed=0)
    assert warm_start(study, trials[:2], SPACE) == 2  # a kill after two: the rest on resume, none twice
    assert warm_start(study, trials, SPACE) == 3 and len(study.trials) == 3
    assert {t.user_attrs[MEMORY_ATTR] for t in study.trials} == {"alpha/n001", "alpha/n002", "alpha/n003"}
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_a_template_is_the_same_when_its_frozen_files_and_space_are():
    hashes = {"env/task.py": "a1", "env/data/train.jsonl": "b2"}
    assert template_fingerprint(hashes, "[lr]\n") == template_fingerprint(dict(reversed(hashes.items())), "[lr]\n")
    assert template_fingerprint(hashes, "[lr]\n") != template_fingerprint({**hashes, "env/task.py": "a2"}, "[lr]\n")
    assert template_fingerprint(hashes, "[lr]\n") != template_fingerprint(hashes, "[beta]\n")


@pytest.mark.slow
def test_a_session_reads_the_earlier_sessions_on_its_template_and_only_those(fast_template, tmp_path, runs_dir):
    first = run_cli("research", "t", "--template", str(fast_template), "--stages", "5", "--seed", "1",
                    "--name", "first")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "memory: on: no earlier session on this template in this store" in first.stdout
    second = run_cli("research", "t", "--template", str(fast_template), "--stages", "1", "--seed", "2",
                     "--name", "second")
    assert second.returncode == 0, second.stdout + second.stderr
    said = "memory: read 1 earlier session on this template: first (tree, 5 stages); 5 stages warm-start TPE"
    assert said in second.stdout
    shown = json.loads(run_cli("show", "second", "--json").stdout)
    assert shown["memory"] == said.removeprefix("memory: ")
    assert said in run_cli("show", "second").stdout
    study = open_study(runs_dir / "sessions" / "second", "second", seed=0)
    assert sorted(t.user_attrs[MEMORY_ATTR] for t in study.trials if MEMORY_ATTR in t.user_attrs) == [
        "first/n001", "first/n002", "first/n003", "first/n004", "first/n005"]
    held = Memory.load(runs_dir / "sessions" / "second")
    assert "first/n001" in held.text and [s["name"] for s in held.sessions] == ["first"]
    (repeat,) = held.repeats  # first's noise probe: the seed spread is known before second trains anything
    assert (repeat["original"], repeat["repeat"], repeat["session"]) == ("n001", "n002", "first")
    assert "of a stage, estimated from 1 repeated stage (n002 repeats n001 in first: " in second.stdout

    off = run_cli("research", "t", "--template", str(fast_template), "--stages", "1", "--name", "off",
                  "--memory", "off")
    assert off.returncode == 0 and "memory: off (--memory off): no earlier session read" in off.stdout
    other = make_template(tmp_path / "other", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    narrow_space(other, {"beta": "[0.0]"})  # another space: another task
    elsewhere = run_cli("research", "t", "--template", str(other), "--stages", "1", "--name", "elsewhere")
    assert elsewhere.returncode == 0 and "memory: on: no earlier session on this template" in elsewhere.stdout

    # the LLM reads the same stages, in its prompt, right after the brief
    reply = json.dumps({"parent": "base", "hyperparameters": DEFAULTS, "edit": [], "rationale": "r",
                        "expected_effect": "e"})
    llm = ScriptedLLM().add(reply)
    with LLMServer(llm) as server:
        done = run_cli("research", "t", "--template", str(fast_template), "--stages", "1", "--name", "asks",
                       "--strategy", "llm", "--llm", "scripted", "--llm-base-url", server.url, "--llm-timeout", "5",
                       env={"OPENAI_API_KEY": "sk-test"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    prompt = llm.requests[0]["messages"][-1]["content"]
    section = prompt.split("# What earlier sessions on this template measured")[1].split("# Search space")[0]
    assert "first/n001" in section and "second/n001" in section and "off/n001" in section
    assert "elsewhere" not in section
    assert "- off (tree, 1 stages scored, 2 training steps in all, the same --seed as this session)" in section
    assert "- first (tree, 5 stages scored, 10 training steps in all):" in section  # --seed 1, not the default 0


def test_the_prompt_says_why_there_is_no_memory_section():
    from autorl.storage.earlier_sessions import Memory

    assert "memory is off for this session" in Memory(mode="off").prompt_text()
    assert "no earlier session on this template is in this store" in Memory(mode="on").prompt_text()
    assert Memory(mode="on", text="## Sessions\n- s1").prompt_text() == "## Sessions\n- s1"
