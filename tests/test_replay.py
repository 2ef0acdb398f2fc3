"""An edit's worth: a winner's schedule trained again with the template's train.py.

The replay must run every stage of the path in order, each from the one before, with the
values, steps and seed the session recorded, and with the train.py it is given (not the
session's); the winner and the replay are then compared item by item on the test split.
"""

import json

import pytest

from autorl.errors import SessionError
from autorl.replay import edit_worth, replay_path
from autorl.stages import template as templates
from autorl.stages.spec import TrialSpec
from sandbox import choose_sandbox

pytestmark = pytest.mark.slow  # sandboxed stages and evaluations

MARK = 'Path(spec["output_dir"], "checkpoint", "trained_by.txt").write_text("{who}")\n'


def recorded_session(tmp_path, template):
    """A session folder as a finished session leaves it: each path node's spec, the winner's checkpoint."""
    session = tmp_path / "session"
    values = template.space.defaults()
    for i, node in enumerate(("n001", "n003"), start=1):
        node_dir = session / "nodes" / node
        node_dir.mkdir(parents=True)
        TrialSpec(node_id=node, init_checkpoint="/elsewhere", output_dir=str(node_dir),
                  metrics_path=str(node_dir / "metrics.jsonl"), hyperparameters={**values, "beta": 0.01 * i},
                  max_steps=2, seed=40 + i, wall_seconds=60).write(node_dir / "spec.json")
    template_base = template.base_model_dir(template.path)
    import shutil

    shutil.copytree(template_base, session / "nodes" / "n003" / "checkpoint")
    return session


def test_a_replay_trains_the_recorded_stages_in_order_with_the_given_train_py(fast_template, tmp_path):
    template = templates.load(str(fast_template))
    session = recorded_session(tmp_path, template)
    train_py = (fast_template / "train.py").read_text() + MARK.format(who="replay")
    checkpoint = replay_path(session, ["n001", "n003"], template, train_py, tmp_path / "replay", choose_sandbox("auto"),
                             wall_factor=4.0)
    assert checkpoint == tmp_path / "replay" / "n003" / "checkpoint"
    assert (checkpoint / "trained_by.txt").read_text() == "replay"
    second = json.loads((tmp_path / "replay" / "n003" / "spec.json").read_text())
    assert second["init_checkpoint"] == str(tmp_path / "replay" / "n001" / "checkpoint")  # chained
    assert second["seed"] == 42 and second["hyperparameters"]["beta"] == 0.02 and second["max_steps"] == 2
    assert second["wall_seconds"] == 240  # the recorded limit, scaled: a busy machine must not kill a replay


def test_the_edits_worth_is_a_paired_test_comparison(fast_template, tmp_path):
    template = templates.load(str(fast_template))
    session = recorded_session(tmp_path, template)
    worth = edit_worth(session, ["n001", "n003"], template, tmp_path / "ablation", choose_sandbox("auto"),
                       stage_sd=0.014)
    winner = json.loads((tmp_path / "ablation" / "winner" / "eval_test.json").read_text())
    replay = json.loads((tmp_path / "ablation" / "replay" / "eval_test.json").read_text())
    assert worth.winner_test == winner["mean"] and worth.replay_test == replay["mean"]
    diffs = [a["correct"] - b["correct"] for a, b in zip(winner["items"], replay["items"])]
    assert worth.delta == pytest.approx(sum(diffs) / len(diffs)) and worth.stage_sd == 0.014
    assert worth.verdict in {"better", "tie", "worse"} and set(worth.to_dict()) >= {"delta", "verdict"}


def test_a_path_whose_spec_is_gone_cannot_be_replayed(fast_template, tmp_path):
    template = templates.load(str(fast_template))
    session = recorded_session(tmp_path, template)
    (session / "nodes" / "n001" / "spec.json").unlink()
    with pytest.raises(SessionError, match="n001: its stage left no spec"):
        replay_path(session, ["n001", "n003"], template, "", tmp_path / "replay", choose_sandbox("auto"))
