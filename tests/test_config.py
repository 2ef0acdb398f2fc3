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
