"""Every baseline strategy runs a complete session through the same sandbox, evaluator
and tracking as the tree search (with an experiment that trains nothing and a stand-in
evaluator, so it is fast)."""

import pytest
from conftest import make_template
from mlflow.tracking import MlflowClient

from autorl.config import make_config
from autorl.session import create_session
from autorl.stages import template as templates


@pytest.fixture(scope="module")
def fast_template(tmp_path_factory):
    return templates.load(str(make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="copy_train.py",
                                                evaluate_py="fast_evaluate.py")))


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
@pytest.mark.parametrize("strategy", ["grid", "random", "optuna", "greedy", "defaults"])
def test_baseline_produces_a_complete_session(strategy, fast_template, runs_dir, tracker):
    config = make_config(name=f"b-{strategy}", topic="t", template=str(fast_template.path), stages=3,
                         strategy=strategy, seed=2, runs_dir=runs_dir, tracking_uri=tracker.uri)
    controller = create_session(config, fast_template, tracker)
    tree = controller.run()
    assert controller.status == "finished" and controller.budget.spent_stages == 3
    assert len(tree.nodes) == 3 and all(n.scored for n in tree.nodes.values())
    assert all(n.depth <= config.max_depth for n in tree.nodes.values())
    assert tree.best().test_score is not None
    assert {n.proposer for n in tree.nodes.values()} == {strategy}
    client = MlflowClient(tracker.uri)
    session = client.get_run(controller.session_run_id)
    assert session.info.status == "FINISHED" and session.data.tags["autorl.strategy"] == strategy
    for node in tree.nodes.values():
        run = client.get_run(node.mlflow_run_id)
        assert run.info.status == "FINISHED" and run.data.tags["autorl.proposer"] == strategy


def test_the_tree_read_back_from_mlflow_is_the_tree_the_search_saw(fast_template, runs_dir, tracker):
    """One codec writes and reads node records: every typed field survives the round trip."""
    from autorl.resume import rebuild_tree

    config = make_config(name="codec", topic="t", template=str(fast_template.path), stages=3, strategy="greedy",
                         seed=1, runs_dir=runs_dir, tracking_uri=tracker.uri)
    controller = create_session(config, fast_template, tracker)
    tree = controller.run()
    assert any(n.diagnosis or n.comparison for n in tree.nodes.values())
    rebuilt = rebuild_tree(tracker, tracker.find_session("codec"))
    assert [n.to_dict() for n in rebuilt.nodes.values()] == [n.to_dict() for n in tree.nodes.values()]
