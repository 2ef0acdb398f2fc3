import pytest

from autorl.config import make_config, parse_duration, prepare_runs_dir
from autorl.errors import ConfigError


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5m", "0"])
def test_bad_durations(text):
    with pytest.raises(ConfigError, match="bad duration"):
        parse_duration(text)


def test_config_errors_are_one_readable_line(tmp_path):
    with pytest.raises(ConfigError, match="--stages: should be greater than or equal to 1"):
        make_config(name="s", topic="t", template="arith", stages=0, runs_dir=tmp_path, tracking_uri="x")
    with pytest.raises(ConfigError, match="unknown strategy"):
        make_config(name="s", topic="t", template="arith", strategy="magic", runs_dir=tmp_path, tracking_uri="x")
    with pytest.raises(ConfigError, match="bad session name"):
        make_config(name="../evil", topic="t", template="arith", runs_dir=tmp_path, tracking_uri="x")


def test_unwritable_runs_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="not writable"):
        prepare_runs_dir(blocker / "runs")


def test_goals_stop_at_the_target_or_when_patience_runs_out():
    from autorl.loop.goals import Goals, stages_without_gain
    from search.tree import Node, Status, Tree

    tree = Tree(base_score=0.50, base_stderr=0.01)
    for i, score in enumerate([0.58, 0.585, 0.57, 0.59], start=1):
        tree.add(Node(f"n{i:03d}", None, 1, {}, seed=i, proposer="tree", status=Status.SUCCEEDED,
                      val_score=score, val_stderr=0.01))
    assert stages_without_gain(tree) == 3  # 0.585, 0.57 and 0.59 are within noise of 0.58
    assert Goals(patience=3).met(tree) == "no gain beyond noise in the last 3 stages (--patience 3)"
    assert Goals(patience=4).met(tree) is None
    assert "target 0.59 reached: n004" in Goals(target=0.59).met(tree)
    assert Goals(target=0.65).met(tree) is None and Goals(target=0.65).distance(tree) == pytest.approx(0.06)


def test_a_target_stated_in_the_topic_is_only_suggested_in_scripts():
    from autorl.cli import confirmed_topic_target

    assert confirmed_topic_target("get addition past 65% accuracy") is None  # no terminal here: not applied


def test_search_parts_can_be_switched_off_by_name_only(tmp_path):
    from autorl.config import make_config
    from autorl.errors import ConfigError

    base = dict(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db")
    assert make_config(**base, ablate=("memory", "budget", "memory")).ablate == ("budget", "memory")
    with pytest.raises(ConfigError, match="--ablate: unknown part 'speed'"):
        make_config(**base, ablate=("speed",))


def test_a_study_storage_url_with_a_password_is_refused(tmp_path):
    base = dict(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db")
    assert make_config(**base, study_storage="postgresql://ann@db:5432/optuna").study_storage
    with pytest.raises(ConfigError, match="--study-storage: holds a password"):
        make_config(**base, study_storage="postgresql://ann:secret@db:5432/optuna")


@pytest.mark.parametrize("stages, depth", [(1, 3), (8, 3), (15, 3), (16, 4), (24, 6)])
def test_the_default_depth_grows_with_the_stage_budget(tmp_path, stages, depth):
    base = dict(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db")
    assert make_config(**base, stages=stages).max_depth == depth
    assert make_config(**base, stages=stages, max_depth=2).max_depth == 2  # a depth asked for is kept
    with pytest.raises(ConfigError, match="--max-depth"):
        make_config(**base, stages=stages, max_depth=0)


def test_the_last_level_width_is_off_unless_asked_for(tmp_path):
    base = dict(name="s", topic="t", runs_dir=tmp_path, tracking_uri="sqlite:///x.db")
    assert make_config(**base).leaf_width is None
    assert make_config(**base, leaf_width=3).leaf_width == 3
    with pytest.raises(ConfigError, match="--leaf-width"):
        make_config(**base, leaf_width=0)
