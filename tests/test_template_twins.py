"""Twin templates keep one train.py. arith and digitsort (a tiny CPU model) and countdown
and wordproblems (a pretrained chat model, CPU or GPU) differ in their task, not in how a
stage trains: what differs between twins (sizes, the base model) lives in env/, so a fix
to one twin's train.py that is not made to the other fails here."""

import difflib
import re
import tomllib

import pytest
from conftest import REPO

TEMPLATES = REPO / "templates"
TWINS = [("arith", "digitsort"), ("countdown", "wordproblems")]
# The only lines twins may word differently, each naming its own task (matched on both sides):
ALLOWED = [
    # the docstring's first line
    re.compile(r'^"""GRPO on [^:]+: one training stage'),
    # the description `train.py --help` prints
    re.compile(r'^    parser = argparse\.ArgumentParser\(description="One GRPO stage on the [\w-]+ task\."\)$'),
]


def comparable(name: str) -> list[str]:
    lines = (TEMPLATES / name / "train.py").read_text().splitlines()
    return [next((f"<allowed {i}: names the task>" for i, rule in enumerate(ALLOWED) if rule.match(line)), line)
            for line in lines]


@pytest.mark.parametrize(("one", "other"), TWINS, ids=lambda name: name)
def test_twin_templates_train_alike(one, other):
    ours, theirs = comparable(one), comparable(other)
    assert sum(line.startswith("<allowed") for line in ours) == len(ALLOWED)  # each allowed line is still there
    diff = list(difflib.unified_diff(ours, theirs, f"templates/{one}/train.py", f"templates/{other}/train.py",
                                     lineterm=""))
    assert not diff, "twin train.py files differ; make the same change to both, or move the value to env/:\n" \
        + "\n".join(diff)


@pytest.mark.parametrize("name", [name for pair in TWINS for name in pair])
def test_a_templates_batch_sizes_are_in_its_constants(name):
    """What train.py reads from [stage] (docs/templates.md) is there and consistent."""
    stage = tomllib.loads((TEMPLATES / name / "env" / "constants.toml").read_text())["stage"]
    space = tomllib.loads((TEMPLATES / name / "space.toml").read_text())
    per_step, micro = stage["completions_per_step"], stage["micro_batch"]
    assert per_step % micro == 0, f"{name}: micro_batch {micro} does not divide completions_per_step {per_step}"
    assert all(per_step % group == 0 for group in space["num_generations"]["choices"]), \
        f"{name}: completions_per_step {per_step} is not a whole number of groups for every num_generations choice"
    assert "per_device_train_batch_size=micro" in (TEMPLATES / name / "train.py").read_text()
