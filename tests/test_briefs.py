"""Each template's research brief agrees with its code: the LLM reads the brief, so a
metric it names must be one the stage logs, and a token count it states must be true."""

import ast
import importlib.util
import re

import pytest

from autorl.stages import template as templates

TEMPLATES = ["arith", "digitsort", "countdown", "wordproblems"]
# What TRL 1.16's GRPOTrainer logs each step (beside a template's own keys), as measured.
TRL_KEYS = {"loss", "grad_norm", "learning_rate", "num_tokens", "epoch", "step_time", "reward", "reward_std",
            "frac_reward_zero_std", "entropy", "kl", "completions/mean_length", "completions/min_length",
            "completions/max_length", "completions/clipped_ratio", "completions/mean_terminated_length",
            "completions/min_terminated_length", "completions/max_terminated_length", "clip_ratio/low_mean",
            "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min", "clip_ratio/high_max"}


def named_metrics(template) -> set[str]:
    """Backticked names in the brief that read as metric keys (not files, prompts or parameters)."""
    names = set(re.findall(r"`([a-z][a-z_]*(?:/[a-z_]+)*)`", template.program))
    return {n for n in names if ("_" in n or "/" in n) and n not in template.space.params}


def string_literals(path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_metric_a_brief_names_is_logged(name):
    template = templates.load(name, require_model=False)
    own = string_literals(template.path / "train.py")
    unknown = sorted(n for n in named_metrics(template) if n not in own and n not in TRL_KEYS)
    assert not unknown, f"{name}/program.md names metrics its train.py does not log: {unknown}"


def test_the_zero_variance_metric_named_is_the_one_computed_exactly():
    """TRL's frac_reward_zero_std misses constant groups of float rewards; the briefs point at
    the templates' own frac_reward_constant, which the diagnosis reads."""
    for name in TEMPLATES:
        template = templates.load(name, require_model=False)
        assert "frac_reward_zero_std" not in named_metrics(template), name


def load_task(template):
    spec = importlib.util.spec_from_file_location(f"task_{template.name}", template.env_dir / "task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["arith", "digitsort"])
def test_the_answer_length_a_brief_and_space_state_is_true(name):
    from transformers import AutoTokenizer

    template = templates.load(name)
    task = load_task(template)
    tokenizer = AutoTokenizer.from_pretrained(template.base_model_dir())
    longest = max(len(tokenizer(task.target_text(p["answer"]) + tokenizer.eos_token,
                                add_special_tokens=False)["input_ids"])
                  for p in task.problems("train", 2000))
    stated = re.findall(r"needs (\d+)", template.program + template.space.params["max_completion_length"].help)
    assert stated and {int(n) for n in stated} == {longest}, (stated, longest)


def known_claims(program: str) -> list[str]:
    """The items of a brief's "What is known" list, each joined onto one line."""
    claims, inside = [], False
    for line in program.splitlines():
        if line.startswith("What is known"):
            inside = True
        elif inside and line.startswith("- "):
            claims.append(line[2:])
        elif inside and line.startswith("  ") and claims:
            claims[-1] += " " + line.strip()
        elif inside and line.strip():
            inside = False
    return claims


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_known_claim_names_the_results_file_it_comes_from(name):
    """The LLM takes "what is known" as fact: each claim must cite a measurement that exists."""
    template = templates.load(name, require_model=False)
    repo = template.path.parent.parent
    for claim in known_claims(template.program):
        cited = re.findall(r"benchmarks/results/[\w.-]+\.(?:md|json)", claim)
        assert cited, f"{name}/program.md states a claim without its results file: {claim!r}"
        missing = [path for path in cited if not (repo / path).is_file()]
        assert not missing, f"{name}/program.md cites results that do not exist: {missing}"
