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
    assert len(node.rationale) > 20000 and len(records.node_tags(node)["autorl.findings"]) > 8000
    session = tracker.start_session("long", params={}, tags={})
    node.mlflow_run_id = tracker.start_node(session, "long", node.id, records.node_tags(node), node.hyperparameters)
    tracker.log_metrics(node.mlflow_run_id, records.node_metrics(node))
    tracker.end_node(node.mlflow_run_id, failed=False)
    reopened = Tracker(tracker.uri)  # what `autorl resume` does in a new process: rebuild the tree from MLflow
    back = rebuild_tree(reopened, reopened.find_session("long")).nodes["n001"]
    assert back.rationale == node.rationale and back.diagnosis == node.diagnosis and back.timing == node.timing


def test_a_damaged_json_tag_is_an_error_naming_the_run(tracker):
    session = tracker.start_session("damaged", params={}, tags={})
    node = long_node()
    run_id = tracker.start_node(session, "damaged", node.id, records.node_tags(node), node.hyperparameters)
    tracker.set_tags(run_id, {"autorl.findings": "[{\"name\": "})  # a torn write
    tracker.end_node(run_id, failed=False)
    (run,) = tracker.node_runs(session)
    with pytest.raises(RecordError, match=f"MLflow run {run_id}: tag autorl.findings is not valid JSON"):
        records.node_from_run(run)
