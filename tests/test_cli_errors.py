"""Bad input: one clear line, a non-zero exit, no traceback, nothing half-created."""

import shutil

import pytest
from conftest import make_template, run_cli
from typer.testing import CliRunner

from autorl.cli import app

runner = CliRunner()


def invoke(*args):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


def assert_clean_error(code, output, fragment):
    assert code == 1, output
    assert "error:" in output and fragment in output
    assert "Traceback" not in output


def test_unknown_template():
    assert_clean_error(*invoke("research", "t", "--template", "nosuch"), "unknown template 'nosuch'")


def test_template_missing_files(tmp_path):
    template = make_template(tmp_path / "tpl")
    (template / "env" / "evaluate.py").unlink()
    assert_clean_error(*invoke("research", "t", "--template", str(template)), "missing env/evaluate.py")


def test_template_without_base_model(tmp_path):
    template = make_template(tmp_path / "tpl")
    shutil.rmtree(template / "env" / "base_model")
    assert_clean_error(*invoke("research", "t", "--template", str(template)), "base model")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--time", "soon"], "bad duration 'soon'"),
    (["--stages", "0"], "--stages: should be greater than or equal to 1 (got 0)"),
    (["--strategy", "magic"], "unknown strategy"),
    (["--workers", "hot"], "--workers: unknown workers 'hot'; choose one of warm, cold"),
    (["--seed", "-1"], "--seed: should be greater than or equal to 0 (got -1)"),
    (["--seed", str(2**32)], "--seed: should be less than 4294967296"),
    (["--llm-timeout", "-1"], "--llm-timeout: should be greater than 0"),
    (["--trial-memory", "0.001"], "--trial-memory: should be greater than or equal to 0.25"),
    (["--max-llm-tokens", "-5"], "--max-llm-tokens: should be greater than or equal to 1"),
    (["--max-llm-cost", "0"], "--max-llm-cost: should be greater than 0"),
    (["--max-depth", "0"], "--max-depth: should be greater than or equal to 1"),
    (["--leaf-width", "0"], "--leaf-width: should be greater than or equal to 1"),
    (["--name", "a/b"], "--name: bad session name"),
])
def test_bad_options_are_refused_before_anything_is_created(tmp_path, args, fragment):
    runs = tmp_path / "fresh-runs"
    assert_clean_error(*invoke("research", "t", "--runs-dir", str(runs), *args), fragment)
    assert not runs.exists()


@pytest.mark.parametrize(("args", "line"), [
    # what the parser refuses, in every command: the same one line as the config's errors
    (["research", "t", "--stages", "abc"], "error: --stages: should be a valid integer (got 'abc')"),
    (["research", "t", "-n", "abc"], "error: --stages: should be a valid integer (got 'abc')"),
    (["research", "t", "--train-steps", "1.5"], "error: --train-steps: should be a valid integer (got '1.5')"),
    (["research", "t", "--seed", "x"], "error: --seed: should be a valid integer (got 'x')"),
    (["research", "t", "--max-depth", "deep"], "error: --max-depth: should be a valid integer"),
    (["research", "t", "--leaf-width", "w"], "error: --leaf-width: should be a valid integer"),
    (["research", "t", "--patience", "p"], "error: --patience: should be a valid integer"),
    (["research", "t", "--parallel", "two"], "error: --parallel: should be a valid integer (got 'two')"),
    (["research", "t", "--max-llm-tokens", "many"], "error: --max-llm-tokens: should be a valid integer"),
    (["research", "t", "--trial-memory", "lots"], "error: --trial-memory: should be a valid number (got 'lots')"),
    (["research", "t", "--trial-cpus", "x"], "error: --trial-cpus: should be a valid number"),
    (["research", "t", "--target", "high"], "error: --target: should be a valid number (got 'high')"),
    (["research", "t", "--llm-timeout", "soon"], "error: --llm-timeout: should be a valid number"),
    (["research", "t", "--max-llm-cost", "$1"], "error: --max-llm-cost: should be a valid number (got '$1')"),
    (["research", "t", "--stages"], "error: --stages: requires an argument"),
    (["research", "t", "--schedule-prior=yes"], "error: --schedule-prior: does not take a value"),
    (["research", "t", "--stagse", "3"], "error: --stagse: no such option of `autorl research` (did you mean"),
    (["research"], "error: TOPIC: missing; see `autorl research --help`"),
    (["resume", "s", "--parallel", "0"], "error: --parallel: should be greater than or equal to 1 (got '0')"),
    (["resume", "s", "--parallel", "z"], "error: --parallel: should be a valid integer (got 'z')"),
    (["resume", "s", "--wait=1"], "error: --wait: does not take a value"),
    (["show"], "error: NAME: missing; see `autorl show --help`"),
    (["show", "s", "--json", "yes"], "error: got unexpected extra argument(s) (yes); see `autorl show --help`"),
    (["ls", "--jsn"], "error: --jsn: no such option of `autorl ls` (did you mean --json?)"),
    (["report", "s", "--open=now"], "error: --open: does not take a value"),
    (["init"], "error: DIRECTORY: missing"),
    (["server", "up", "--port", "http"], "error: --port: should be a valid integer (got 'http')"),
    (["server", "up", "--pg-port", "5433.5"], "error: --pg-port: should be a valid integer"),
    (["server", "up", "--ray-cpus", "all"], "error: --ray-cpus: should be a valid integer (got 'all')"),
    (["server", "start"], "error: no such command 'start' (did you mean 'status'?); see `autorl server --help`"),
    (["serve"], "error: no such command 'serve' (did you mean 'server'?); see `autorl --help`"),
    (["frobnicate"], "error: no such command 'frobnicate'; see `autorl --help`"),
    (["--verbose", "ls"], "error: --verbose: no such option of `autorl`"),
])
def test_every_value_the_parser_refuses_is_one_line(tmp_path, monkeypatch, args, line):
    """Not click's usage box: one line on stderr starting `error: `, exit code 1, nothing made."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("AUTORL_RUNS_DIR", str(tmp_path / "fresh-runs"))
    result = runner.invoke(app, args, prog_name="autorl")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [result.stderr.strip()] and result.stderr.startswith(line), result.stderr
    assert "Usage:" not in result.stderr and "Traceback" not in result.stderr and not result.stdout
    assert not (tmp_path / "fresh-runs").exists() and list((tmp_path / "cwd").iterdir()) == []


def test_the_installed_command_says_it_the_same_way():
    """The real process (the console script's `app`), as a person types it in the README."""
    done = run_cli("research", "t", "--stages", "abc")
    assert done.returncode == 1 and done.stderr == "error: --stages: should be a valid integer (got 'abc')\n"


def test_help_is_still_help():
    assert runner.invoke(app, ["research", "--help"]).exit_code == 0
    bare = runner.invoke(app, [])  # no command: the list of commands, not an error line
    assert "Commands" in bare.output and "error:" not in bare.output


def test_an_empty_topic_is_refused(tmp_path):
    runs = tmp_path / "fresh-runs"
    assert_clean_error(*invoke("research", "  ", "--runs-dir", str(runs)), "TOPIC: the topic is empty")
    assert not runs.exists()


def test_unwritable_runs_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_clean_error(*invoke("research", "t", "--runs-dir", str(blocker / "runs")), "not writable")


def test_tracking_uri_that_does_not_answer(runs_dir):
    code, output = invoke("research", "t", "--tracking-uri", "http://127.0.0.1:9")
    assert_clean_error(code, output, "does not answer")
    assert not (runs_dir / "sessions").exists()


def test_show_unknown_session():
    assert_clean_error(*invoke("show", "ghost"), "no session named 'ghost'")


def test_duplicate_session_name(tmp_path, runs_dir):
    from autorl.config import make_config, prepare_runs_dir
    from autorl.session import create_session
    from autorl.stages import template as templates
    from autorl.storage.tracking import Tracker

    tracker = Tracker.for_runs_dir(prepare_runs_dir(runs_dir))
    template = templates.load("arith")
    create_session(make_config(name="dup", topic="t", template="arith", runs_dir=runs_dir, tracking_uri=tracker.uri),
                   template, tracker)
    assert_clean_error(*invoke("research", "t", "--name", "dup"), "already exists")


def test_init_copies_an_editable_template(tmp_path):
    code, output = invoke("init", str(tmp_path / "mine"))
    assert code == 0, output
    assert (tmp_path / "mine" / "train.py").is_file() and (tmp_path / "mine" / "env" / "base_model").is_dir()
    assert_clean_error(*invoke("init", str(tmp_path / "mine")), "not an empty folder")
    (tmp_path / "a-file").write_text("x")
    assert_clean_error(*invoke("init", str(tmp_path / "a-file")), "not an empty folder")


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
def test_a_gpu_that_is_not_there_is_one_line():
    done = run_cli("research", "t", "--gpus", "7", "--stages", "1")
    assert done.returncode == 1 and "no GPU 7 on this machine" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_template_without_its_base_model_says_how_to_give_it_one(tmp_path):
    assert_clean_error(*invoke("research", "t", "--template", "countdown", "--stages", "1"),
                       "--base-model HF_ID_OR_FOLDER")
    assert_clean_error(*invoke("init", str(tmp_path / "c"), "--template", "countdown", "--base-model",
                               str(tmp_path / "nowhere-no-such-org/x")), "cannot download base model")
    assert not (tmp_path / "c").exists()  # nothing half-made is left behind
