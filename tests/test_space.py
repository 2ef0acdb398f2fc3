import random

import pytest

from autorl.stages import template as templates
from search.errors import ProposalError, SpaceError
from search.space import SearchSpace


@pytest.fixture
def space():
    return templates.load("arith").space


def test_defaults_are_valid(space):
    assert space.check(space.defaults()) == space.defaults()


def test_samples_stay_inside(space):
    rng = random.Random(0)
    for _ in range(200):
        values = space.check(space.sample(rng))
        assert 1e-5 <= values["learning_rate"] <= 1e-3
        assert values["num_generations"] in (4, 8, 16)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("learning_rate", 0.5, "outside"),
        ("learning_rate", float("nan"), "finite"),
        ("num_generations", 5, "not one of"),
        ("temperature", "hot", "finite number"),
    ],
)
def test_bad_values_are_explained(space, name, value, message):
    values = {**space.defaults(), name: value}
    with pytest.raises(ProposalError, match=message):
        space.check(values)


def test_unknown_and_missing_names(space):
    with pytest.raises(ProposalError, match="unknown hyperparameters"):
        space.check({**space.defaults(), "warmup": 3})
    values = space.defaults()
    values.pop("beta")
    with pytest.raises(ProposalError, match="missing"):
        space.check(values)


def test_invalid_space_file(tmp_path):
    path = tmp_path / "space.toml"
    path.write_text('[lr]\ntype = "float"\nlow = 1\nhigh = 0\ndefault = 0.5\n')
    with pytest.raises(SpaceError, match=r"\[lr\] lr: needs numeric low < high"):
        SearchSpace.from_toml(path)
