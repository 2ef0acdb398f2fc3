"""A node's record round-trips through MLflow whole: long values are not cut, and a value
that cannot be decoded is an error naming the run, never a silent default."""

import pytest

from autorl.errors import RecordError
from autorl.resume import rebuild_tree
from autorl.storage import records
from autorl.storage.tracking import Tracker
from search.tree import Finding, Node, Status


def long_node() -> Node:
    findings = [Finding(f"finding_{i}", "warning", "evidence " * 80, "try something " * 20, steps=(i, i + 5))
                for i in range(12)]
    return Node("n001", None, 1, {"learning_rate": 5e-5}, seed=1, proposer="llm", commit="abc", status=Status.SUCCEEDED,
                val_score=0.6, val_stderr=0.015, rationale="because " * 2900, diagnosis=findings,
                timing={"started_at": "2026-12-04T10:00:00Z", "phases": ["x" * 50] * 200})


def test_a_node_with_a_20000_character_rationale_and_12_findings_round_trips(tracker):
    node = long_node()
    assert len(node.rationale) > 20000 and len(records.node_tags(node)[records.NODE_KEY]) > 8000
    session = tracker.start_session("long", params={}, tags={})
    node.mlflow_run_id = tracker.start_node(session, "long", node.id, 1, records.node_tags(node),
                                            node.hyperparameters)
    tracker.log_metrics(node.mlflow_run_id, records.node_metrics(node))
    tracker.end_node(node.mlflow_run_id, failed=False)
    reopened = Tracker(tracker.uri)  # what `autorl resume` does in a new process: rebuild the tree from MLflow
    back = rebuild_tree(reopened, reopened.find_session("long")).nodes["n001"]
    assert back.rationale == node.rationale and back.diagnosis == node.diagnosis and back.timing == node.timing


def test_a_damaged_json_tag_is_an_error_naming_the_run(tracker):
    session = tracker.start_session("damaged", params={}, tags={})
    node = long_node()
    run_id = tracker.start_node(session, "damaged", node.id, 1, records.node_tags(node), node.hyperparameters)
    tracker.set_tags(run_id, {records.NODE_KEY: "{\"id\": "})  # a torn write
    tracker.end_node(run_id, failed=False)
    (run,) = tracker.node_runs(session)
    with pytest.raises(RecordError, match=f"MLflow run {run_id}: tag autorl.node is not valid JSON"):
        records.node_from_run(run)


def test_the_node_record_is_the_nodes_own_codec(tracker):
    """What MLflow holds of a node is ``Node.to_dict`` (the codec the live channel uses too):
    every field of a finished node comes back equal, with no field mapped by hand."""
    node = long_node()
    node.test_score, node.attempt, node.optuna_trial, node.kept = 0.55, 2, 7, True
    session = tracker.start_session("codec", params={}, tags={})
    node.mlflow_run_id = tracker.start_node(session, "codec", node.id, 2, records.node_tags(node), {})
    tracker.end_node(node.mlflow_run_id, failed=False)
    (back,) = records.nodes_from_runs(tracker.node_runs(session))
    assert back.to_dict() == node.to_dict()


def test_a_node_run_is_created_once_per_attempt_and_a_run_without_a_record_is_no_node(tracker):
    """Creating the same attempt again (a kill mid-creation, a call repeated after a lost
    connection) leaves one live run; a run without the node's record, as a kill inside
    version 2's creation left it, is skipped by readers and replaced by the next creation."""
    from mlflow.tracking import MlflowClient

    session = tracker.start_session("once", params={}, tags={})
    node = long_node()
    half = MlflowClient(tracker.uri).create_run(tracker.ensure_store(), tags={
        "mlflow.parentRunId": session, "autorl.kind": "node", "autorl.session": "once", "autorl.node_id": node.id})
    assert records.nodes_from_runs(tracker.node_runs(session)) == []
    first = tracker.start_node(session, "once", node.id, 1, records.node_tags(node), node.hyperparameters)
    again = tracker.start_node(session, "once", node.id, 1, records.node_tags(node), node.hyperparameters)
    live = [r.info.run_id for r in tracker.node_runs(session)]
    assert live == [again] and first != again and half.info.run_id not in live
    assert [n.id for n in records.nodes_from_runs(tracker.node_runs(session))] == [node.id]
