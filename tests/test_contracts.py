"""Contracts checked at run time: a trial or evaluator that breaks the template contract
fails its node with the reason; the same breach again stops the session with a non-zero
exit and `ls` says it can never finish; a session where no stage succeeded exits non-zero."""

import json

import pytest
from conftest import make_template, run_cli

pytestmark = pytest.mark.slow  # whole CLI sessions in subprocesses


def session(name: str) -> dict:
    return json.loads(run_cli("show", name, "--json").stdout)


def listed(name: str) -> dict:
    return next(s for s in json.loads(run_cli("ls", "--json").stdout) if s["name"] == name)


def assert_stopped_for_good(done, name: str, fragment: str) -> dict:
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and fragment in done.stderr
    data = session(name)
    assert data["status"] == "failed"
    row = listed(name)
    assert not row["resumable"] and row["resume_note"].startswith("can never finish")
    again = run_cli("resume", name)
    assert again.returncode == 1 and "can never finish" in again.stderr
    return data


def test_a_trial_whose_metrics_contradict_its_footer_fails_and_a_repeat_stops_the_session(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="silent_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "silent", "--template", str(template), "--stages", "4", "--name", "silent")
    data = assert_stopped_for_good(done, "silent", "2 stages in a row broke the template contract")
    assert [n["status"] for n in data["nodes"]] == ["failed", "failed"]  # stopped before spending stages 3 and 4
    assert "logged no per-step metrics to metrics_path although its footer says 20 steps" in data["nodes"][0]["reason"]


def evaluator_changed(tmp_path, old: str, new: str):
    """A stand-in template whose evaluator has ``old`` replaced by ``new``."""
    template = make_template(tmp_path / "tpl", train_py="copy_train.py", evaluate_py="fast_evaluate.py")
    evaluate = template / "env" / "evaluate.py"
    evaluate.write_text(evaluate.read_text().replace(old, new))
    return template


def test_an_evaluator_output_without_stderr_fails_the_node_and_a_repeat_stops_the_session(tmp_path, runs_dir):
    template = evaluator_changed(tmp_path, '"stderr": stderr,',
                                 '**({} if "nodes" in str(args.checkpoint) else {"stderr": stderr}),')
    done = run_cli("research", "no stderr", "--template", str(template), "--stages", "4", "--name", "nostderr")
    data = assert_stopped_for_good(done, "nostderr", "broke the template contract")
    assert [n["status"] for n in data["nodes"]] == ["failed", "failed"]
    assert "no numeric 'stderr'" in data["nodes"][0]["reason"]


def test_an_evaluator_items_without_correct_stops_at_the_base_model(tmp_path, runs_dir):
    template = evaluator_changed(tmp_path, '"items": items}',
                                 '"items": [{"id": i["id"], "right": i["correct"]} for i in items]}')
    done = run_cli("research", "no correct", "--template", str(template), "--stages", "2", "--name", "nocorrect")
    data = assert_stopped_for_good(done, "nocorrect", "'items' is not a list of objects with 'id' and 'correct'")
    assert data["nodes"] == []


def test_a_session_where_no_stage_succeeded_exits_non_zero(tmp_path, runs_dir):
    template = make_template(tmp_path / "tpl", train_py="crash_train.py", evaluate_py="fast_evaluate.py")
    done = run_cli("research", "all crash", "--template", str(template), "--stages", "2", "--name", "allcrash")
    data = assert_stopped_for_good(done, "allcrash", "")
    assert [n["status"] for n in data["nodes"]] == ["failed", "failed"]
    assert "no stage succeeded" in listed("allcrash")["resume_note"]
