"""A Ray job's files through a run's artifact store (autorl/stages/job_files.py), on MLflow's
real local artifact repository: a folder is taken only whole, steps only as whole lines,
and the steps are uploaded while the file grows."""

import json
import time

from autorl.stages.job_files import COMPLETE, RunFiles, whole_lines
from autorl.stages.remote_stage import StepUploads, is_address


def test_a_line_cut_short_waits_for_the_next_upload():
    assert whole_lines('{"step": 1}\n{"step": 2}\n{"st') == ['{"step": 1}', '{"step": 2}']
    assert whole_lines('{"step": 1}\n') == ['{"step": 1}'] and whole_lines(None) == [] and whole_lines("") == []


def test_a_folder_is_taken_only_once_it_was_sent_whole(tmp_path):
    files = RunFiles((tmp_path / "store").as_uri(), None)
    sent = tmp_path / "node"
    (sent / "checkpoint").mkdir(parents=True)
    (sent / "checkpoint" / "model.bin").write_bytes(b"x" * 10)
    (sent / "logs").mkdir()
    (sent / "logs" / "stdout.log").write_text("trained\n")
    (sent / "eval_validation.json").write_text("{}")
    files.put_folder(sent, "jobs/j1/out", skip=("checkpoint",))
    assert files.get_folder("jobs/j1/out", tmp_path / "got")
    got = sorted(str(p.relative_to(tmp_path / "got")) for p in (tmp_path / "got").rglob("*") if p.is_file())
    assert got == ["eval_validation.json", "logs/stdout.log"]  # the skipped part stayed, the marker is not kept
    (tmp_path / "store" / "jobs" / "j1" / "out" / COMPLETE).unlink()  # as if the job died mid-upload
    assert not files.get_folder("jobs/j1/out", tmp_path / "again") and not (tmp_path / "again").exists()
    assert files.get_text("jobs/j1/nothing.json") is None and not files.exists("jobs/j1/nothing.json")
    files.put_text('{"ok": 1}', "jobs/j1/stage_result.json")
    assert files.exists("jobs/j1/stage_result.json") and json.loads(files.get_text("jobs/j1/stage_result.json"))
    files.delete("jobs/j1")
    assert not files.exists("jobs/j1/stage_result.json")


def test_steps_are_uploaded_while_the_file_grows_and_once_more_at_the_end(tmp_path):
    files = RunFiles((tmp_path / "store").as_uri(), None)
    metrics = tmp_path / "metrics.jsonl"
    with StepUploads(files, metrics, "jobs/j1", period=0.05):
        metrics.write_text('{"step": 1}\n')
        deadline = time.monotonic() + 10
        while whole_lines(files.get_text("jobs/j1/metrics.jsonl")) != ['{"step": 1}']:
            assert time.monotonic() < deadline, "the first step was never uploaded while the stage ran"
            time.sleep(0.05)
        with metrics.open("a") as handle:
            handle.write('{"step": 2}\n')
    assert len(whole_lines(files.get_text("jobs/j1/metrics.jsonl"))) == 2  # the last upload at the end


def test_a_start_is_an_address_or_a_path():
    assert is_address("mlflow-artifacts:/1/abc/artifacts/checkpoint") and is_address("s3://b/k/checkpoint")
    assert is_address("file:///runs/mlartifacts/1/abc/artifacts/checkpoint")
    assert not is_address("/runs/sessions/s/workspace/env/base_model") and not is_address("relative/dir")
