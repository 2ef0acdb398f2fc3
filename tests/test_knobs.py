"""Every searched knob does something: for each parameter of a template's space, two 2-step
stages from the same checkpoint and seed, differing only in that parameter, end with
different weights (the stage length itself is the budget tests' concern)."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

from autorl.stages import template as templates

pytestmark = pytest.mark.slow  # real TRL stages, one per parameter

# Parameters that act only in some stages, and why (their space.toml help says so too).
ACTS_ONLY_SOMETIMES = {
    "max_completion_length": "a cap changes nothing while every completion is shorter than it; from the base "
                             "models (answers of 7 or 9 tokens) no completion reaches the smaller cap in 2 steps",
}


@pytest.mark.parametrize("name", ["arith", "digitsort"])
def test_every_parameter_of_the_space_changes_what_a_stage_trains(name, tmp_path):
    template = templates.load(name)
    done = subprocess.run([sys.executable, str(REPO / "tests" / "knob_runner.py"), str(template.path), str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    changed = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(changed) == set(template.space.params) - {"max_steps"}
    inert = [p for p, moved in changed.items() if not moved and p not in ACTS_ONLY_SOMETIMES]
    assert not inert, f"{name}: these parameters did not change the weights after 2 steps: {inert}"
