"""The TUI, driven by Textual's Pilot against a real controller (fast stand-in stages),
and once through the real `autorl` command under a pseudo-terminal."""

import json
import os
import signal
import time

import optuna
import pexpect
import pytest
from conftest import AUTORL, REPO, ignore_sigint, make_template, run_cli
from mlflow.tracking import MlflowClient

from autorl.config import make_config
from autorl.loop.approval import Gate
from autorl.session import create_session
from autorl.stages import template as templates
from autorl.views.tui import TuiObserver, make_app


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def fast_template(tmp_path_factory):
    path = make_template(tmp_path_factory.mktemp("tpl") / "tpl", train_py="copy_train.py",
                         evaluate_py="fast_evaluate.py")
    return templates.load(str(path))


def session(fast_template, runs_dir, tracker, name="tui", stages=2, mode="all"):
    config = make_config(name=name, topic="t", template=str(fast_template.path), stages=stages, runs_dir=runs_dir,
                         tracking_uri=tracker.uri)
    return create_session(config, fast_template, tracker, observer=TuiObserver(), gate=Gate(mode, decided_by="tester"))


async def until(pilot, condition, timeout=90.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the app"
        await pilot.pause(0.1)


@pytest.mark.anyio
async def test_approve_runs_the_stage_and_logs_the_decision(fast_template, runs_dir, tracker):
    controller = session(fast_template, runs_dir, tracker, stages=1)
    app = make_app(controller)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("a")
        await until(pilot, lambda: app.ended is not None)
    node = controller.tree.nodes["n001"]
    assert node.scored and controller.status == "finished"
    tags = MlflowClient(tracker.uri).get_run(node.mlflow_run_id).data.tags
    assert tags["autorl.decision"] == "approve" and tags["autorl.decided_by"] == "tester"


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
@pytest.mark.anyio
async def test_reject_with_a_reason_fails_the_trial_and_reaches_mlflow(fast_template, runs_dir, tracker):
    controller = session(fast_template, runs_dir, tracker, stages=1)
    app = make_app(controller)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        first = app.pending.proposal
        await pilot.press("r")
        await pilot.press(*"too timid")
        await pilot.press("enter")
        await until(pilot, lambda: app.pending is not None and app.pending.proposal is not first)
        assert app.pending.proposal.hyperparameters != first.hyperparameters  # not the same stage again
        await pilot.press("a")
        await until(pilot, lambda: app.ended is not None)
    decisions_file = controller.config.session_dir / "decisions.jsonl"
    decisions = [json.loads(line) for line in decisions_file.read_text().splitlines()]
    assert decisions[0]["action"] == "reject" and decisions[0]["reason"] == "too timid" and decisions[0]["node"] is None
    assert decisions[1]["action"] == "approve" and decisions[1]["node"] == "n001"
    study = controller.parts.proposer.study
    assert study.trials[first.optuna_trial].state == optuna.trial.TrialState.FAIL
    assert len(controller.tree.nodes) == 1 and controller.budget.spent_stages == 1  # a rejection costs nothing
    run = MlflowClient(tracker.uri).get_run(controller.session_run_id)
    assert run.data.metrics["rejected_proposals"] == 1


@pytest.mark.anyio
async def test_an_invalid_edit_is_explained_and_a_valid_one_runs(fast_template, runs_dir, tracker):
    controller = session(fast_template, runs_dir, tracker, stages=1)
    app = make_app(controller)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("e")
        app.query_one("#input").value = "learning_rate=5"
        await pilot.press("enter")
        await pilot.pause(0.2)
        log = "\n".join(line.text for line in app.query_one("#log").lines)
        assert "edit rejected" in log and "learning_rate=5" in log and "outside" in log
        assert app.pending is not None  # still waiting
        app.query_one("#input").value = "learning_rate=0.0002 loss_type=grpo"
        await pilot.press("enter")
        await until(pilot, lambda: app.ended is not None)
    node = controller.tree.nodes["n001"]
    assert node.hyperparameters["learning_rate"] == 0.0002 and node.hyperparameters["loss_type"] == "grpo"
    tags = MlflowClient(tracker.uri).get_run(node.mlflow_run_id).data.tags
    assert tags["autorl.decision"] == "edit" and "edited by tester" in tags["autorl.rationale"]


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
@pytest.mark.anyio
async def test_pause_holds_the_next_stage_until_resumed(fast_template, runs_dir, tracker):
    controller = session(fast_template, runs_dir, tracker, stages=2)
    app = make_app(controller)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("p")  # pause: the approved stage runs, the next one does not start
        await pilot.press("a")
        await until(pilot, lambda: "n001" in controller.tree.nodes and controller.tree.nodes["n001"].scored)
        await pilot.pause(2.0)
        assert app.pending is None and len(controller.tree.nodes) == 1
        await pilot.press("p")
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("a")
        await until(pilot, lambda: app.ended is not None)
    assert len(controller.tree.nodes) == 2


@pytest.mark.anyio
async def test_quit_stops_the_session_cleanly(fast_template, runs_dir, tracker):
    controller = session(fast_template, runs_dir, tracker, stages=3)
    app = make_app(controller)
    async with app.run_test(size=(150, 45)) as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.pause(0.5)
        proposal = app.pending.proposal
        app.save_screenshot(str(runs_dir / "pending.svg"))
        await pilot.press("q")
        await until(pilot, lambda: app.ended is not None)
    assert controller.status == "stopped" and controller.tree.nodes == {}
    decisions = controller.config.session_dir / "channel" / "decisions"
    assert not list(decisions.iterdir())  # a stop is not a decision: resume asks about the proposal again
    run = MlflowClient(tracker.uri).get_run(controller.session_run_id)
    assert run.info.status == "KILLED"
    svg = (runs_dir / "pending.svg").read_text()  # the main screen: tree, the proposal with its values
    learning_rate = f"{proposal.hyperparameters['learning_rate']:.3g}"
    for text in ("hyperparameter", "learning_rate", learning_rate, "TPE", "diagnosis", "temperature"):
        assert text in svg, text  # none of these is in the key-binding footer


def node_labels(app) -> dict[str, str]:
    """The tree widget's labels, by node id (the root as "base")."""
    root = app.query_one("#nodes").root
    labels, todo = {"base": str(root.label)}, list(root.children)
    while todo:
        item = todo.pop()
        labels[str(item.label).split()[0]] = str(item.label)
        todo.extend(item.children)
    return labels


@pytest.mark.anyio
async def test_the_app_draws_only_the_snapshots_the_controllers_thread_sent(fast_template, runs_dir, tracker):
    """The controller's thread owns the tree and goes on changing it: the app draws the copy
    each event carried, and never reads the live tree (which could grow while it iterated)."""
    import asyncio
    import dataclasses

    from search.proposers import Proposal
    from search.tree import Node, Status, Tree

    controller = session(fast_template, runs_dir, tracker, name="snapshots", stages=1)
    observer = controller.observer.find(TuiObserver)
    tree = Tree(base_score=0.25, base_stderr=0.01)
    first = tree.add(Node(id="n001", parent=None, depth=1, hyperparameters={"learning_rate": 1e-4}, seed=1,
                          proposer="tpe", status=Status.SUCCEEDED, val_score=0.5, val_stderr=0.02))
    observer.stage_finished(first, tree)  # heard before the app connects: held until it does
    observer.proposal_pending(Proposal(parent="n001", hyperparameters={"learning_rate": 2e-4}), first, key="k")
    first.val_score, first.hyperparameters["learning_rate"] = 0.9, 3e-4  # the controller goes on
    tree.add(Node(id="n002", parent="n001", depth=2, hyperparameters={}, seed=2, proposer="tpe",
                  status=Status.RUNNING))
    controller.tree = None  # anything in the app that reads the controller's tree fails
    app = make_app(controller, run_controller=False)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None and "n001" in node_labels(app))
        labels = node_labels(app)
        assert labels["base"] == "base 0.250" and "0.500 ± 0.020" in labels["n001"] and "n002" not in labels
        assert app.pending.parent is not first and app.pending.parent.hyperparameters["learning_rate"] == 1e-4
        with pytest.raises(dataclasses.FrozenInstanceError):
            app.snapshot.nodes[0].val_score = 1.0
        await pilot.pause(0.3)
        assert "0.500" in node_labels(app)["n001"]  # unchanged until the next snapshot

        await asyncio.to_thread(observer.stage_started, tree.nodes["n002"], tree)  # from another thread, as live
        await until(pilot, lambda: "n002" in node_labels(app))
        labels = node_labels(app)
        assert "0.900 ± 0.020" in labels["n001"] and "running" in labels["n002"]


@pytest.mark.parametrize("key", ["ctrl+c", "ctrl+q"])
@pytest.mark.anyio
async def test_ctrl_c_and_ctrl_q_stop_the_session_as_q_does(key, fast_template, runs_dir, tracker):
    """Textual's own ctrl+q would leave the app with the controller still running in its thread."""
    controller = session(fast_template, runs_dir, tracker, name=f"keys-{key[-1]}", stages=2)
    app = make_app(controller)
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press(key)
        await until(pilot, lambda: app.ended is not None)
    assert controller.status == "stopped" and controller.gate.stop_requested.is_set()


def test_approve_needs_a_terminal():
    done = run_cli("research", "t", "--approve", "edits", "--stages", "1")
    assert done.returncode == 1 and "needs an interactive terminal" in done.stderr


@pytest.mark.slow
def test_real_command_under_a_pty_approves_with_a_key_press(fast_template, runs_dir):
    child = pexpect.spawn(AUTORL[0], [*AUTORL[1:], "research", "t", "--template", str(fast_template.path),
                                      "--stages", "1", "--approve", "all", "--name", "pty"],
                          cwd=str(REPO), env={**os.environ, "TERM": "xterm-256color"}, dimensions=(40, 140),
                          timeout=120, encoding="utf-8")
    try:
        child.expect("hyperparameter")
        child.send("a")
        child.expect("session finished")
        child.send("q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    data = json.loads(run_cli("show", "pty", "--json").stdout)
    assert data["status"] == "finished" and data["nodes"][0]["status"] == "succeeded"
    tags = MlflowClient(f"sqlite:///{runs_dir / 'mlflow.db'}").get_run(data["nodes"][0]["mlflow_run_id"]).data.tags
    assert tags["autorl.decision"] == "approve"


def read_while(child, condition, what: str, timeout: float = 120) -> None:
    """wait_until for a process under a pty: keep reading its screen, or it blocks writing it."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert child.isalive(), f"the TUI ended before {what}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        try:
            child.read_nonblocking(65536, timeout=0.1)
        except pexpect.TIMEOUT:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_tui_session_cleanly(sig, tmp_path, runs_dir):
    """SIGTERM, or SIGINT to a process started with SIGINT ignored (as `nohup ... &` does), stops a
    session run in the TUI as `q` does, mid-stage, and exits 130 as without the TUI."""
    template = make_template(tmp_path / "tpl", train_py="held_copy_train.py", evaluate_py="fast_evaluate.py")
    nodes = runs_dir / "sessions" / "sig" / "nodes"
    child = pexpect.spawn(AUTORL[0], [*AUTORL[1:], "research", "t", "--template", str(template), "--stages", "2",
                                      "--approve", "all", "--name", "sig"],
                          cwd=str(REPO), env={**os.environ, "TERM": "xterm-256color"}, dimensions=(40, 140),
                          timeout=120, encoding="utf-8", preexec_fn=ignore_sigint)
    try:
        child.expect("hyperparameter")
        child.send("a")
        read_while(child, (nodes / "n001" / "metrics.jsonl").exists, "n001 starts training")  # held there
        child.kill(sig)
        child.expect(pexpect.EOF)
        child.close()
    finally:
        child.close(force=True)
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus, child.before)
    data = json.loads(run_cli("show", "sig", "--json").stdout)
    assert data["status"] == "stopped" and [n["status"] for n in data["nodes"]] == ["interrupted"]
    assert data["nodes"][0]["mlflow_status"] == "KILLED"
    listed = json.loads(run_cli("ls", "--json").stdout)
    assert listed[0]["resumable"], listed


# -- attaching to a session run by another process (autorl/loop/channel.py) ----------------------------

def test_the_first_decision_wins_and_later_ones_are_refused(tmp_path):
    from autorl.loop.channel import Channel
    from search.tree import Decision

    one, two = Channel.open(tmp_path), Channel(tmp_path)  # two viewers on the same folder
    assert one.post_decision("p001-x", Decision("approve", decided_by="ann"))
    assert not two.post_decision("p001-x", Decision("reject", "no", decided_by="bob"))
    assert one.decision_for("p001-x") == Decision("approve", decided_by="ann")
    one.consume("p001-x")
    assert one.decision_for("p001-x") is None and len(list(one.decided.iterdir())) == 1
    for garbage in ('{"action": "explode"}', '[1]', '{"action": "edit", "hyperparameters": "lr=1"}', '{"act'):
        (one.decisions / "p002-y.json").write_text(garbage)  # garbage never stops the session
        assert two.decision_for("p002-y") is None and (one.decisions / "p002-y.json").exists()  # viewers only read
        assert one.decision_for("p002-y", set_aside=True) is None and not (one.decisions / "p002-y.json").exists()
    assert "could not be read" in one.events.read_text()


def test_a_decision_sent_while_the_controller_was_away_is_used_once(tmp_path):
    from autorl.loop.channel import Channel, proposal_key
    from search.proposers import Proposal
    from search.tree import Decision

    channel = Channel.open(tmp_path)
    proposal = Proposal(parent=None, hyperparameters={"learning_rate": 1e-4})
    key = proposal_key(proposal, tree_size=0)
    assert key == proposal_key(Proposal(parent=None, hyperparameters={"learning_rate": 1e-4}), 0)  # stable
    assert key != proposal_key(proposal, tree_size=1)
    channel.post_decision(key, Decision("approve", decided_by="ann"))  # e.g. while the controller restarted
    gate = Gate("all", decided_by="local", channel=channel)
    assert gate.review(proposal, key).decided_by == "ann"
    gate.settle(key)
    assert channel.decision_for(key) is None  # acted on: never applied a second time
    assert not channel.post_decision(key, Decision("reject", decided_by="late viewer"))
    assert gate.key_for("p001-abc") == "p001-abc.0"
    channel.post_decision("p001-abc.0", Decision("reject", decided_by="ann"))
    channel.consume("p001-abc.0")
    assert gate.key_for("p001-abc") == "p001-abc.1"  # the same stage proposed again is asked anew
    gate.pending_key = "p002-new.0"  # a key pressed on a proposal shown before never lands on the next one
    assert not gate.decide(Decision("approve"), "p001-abc.1") and gate.decisions.empty()


def headless_session(fast_template, runs_dir, tracker, name, stages=1):
    from autorl.loop.observer import Observer

    config = make_config(name=name, topic="t", template=str(fast_template.path), stages=stages, runs_dir=runs_dir,
                         tracking_uri=tracker.uri, approve="all")
    return create_session(config, fast_template, tracker, observer=Observer(), gate=Gate("all", decided_by="nobody"))


def attached_to_a_running_session(fast_template, runs_dir, tracker, name):
    """A headless session running in a thread, and a TUI attached to it as another process would."""
    import threading

    from autorl.views.tui import attach_app

    controller = headless_session(fast_template, runs_dir, tracker, name)
    runner = threading.Thread(target=controller.run, daemon=True)
    runner.start()
    return controller, runner, attach_app(controller.config.session_dir, "viewer")


@pytest.mark.anyio
async def test_an_attached_tui_approves_a_headless_sessions_proposal(fast_template, runs_dir, tracker):
    controller, runner, app = attached_to_a_running_session(fast_template, runs_dir, tracker, "attached")
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("a")
        await until(pilot, lambda: app.ended is not None)
        assert "n001" in str(app.query_one("#nodes").root.children[0].label)
    runner.join(60)
    node = controller.tree.nodes["n001"]
    assert node.scored and controller.status == "finished"
    assert node.decision.action == "approve" and node.decision.decided_by == "viewer"


@pytest.mark.anyio
async def test_an_attached_edit_is_validated_before_it_is_sent(fast_template, runs_dir, tracker):
    controller, runner, app = attached_to_a_running_session(fast_template, runs_dir, tracker, "attached-edit")
    async with app.run_test() as pilot:
        await until(pilot, lambda: app.pending is not None)
        await pilot.press("e")
        app.query_one("#input").value = "learning_rate=5"
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert "outside" in "\n".join(line.text for line in app.query_one("#log").lines)
        app.query_one("#input").value = "learning_rate=0.0002"
        await pilot.press("enter")
        await until(pilot, lambda: app.ended is not None)
    runner.join(60)
    assert controller.tree.nodes["n001"].hyperparameters["learning_rate"] == 0.0002


@pytest.mark.slow  # seconds each: the full suite runs it, the edit loop does not
def test_tui_names_a_missing_session():
    done = run_cli("tui", "nothing-here")
    assert done.returncode == 1 and "no session 'nothing-here'" in done.stderr


@pytest.mark.slow
def test_tui_attaches_from_another_terminal_to_a_headless_session(fast_template, runs_dir):
    import subprocess

    session = subprocess.Popen([*AUTORL, "research", "t", "--template", str(fast_template.path), "--stages", "1",
                                "--approve", "all", "--wait", "--name", "headless"], cwd=str(REPO),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (runs_dir / "sessions" / "headless" / "channel" / "pending.json").exists():
            assert session.poll() is None, session.stdout.read()
            assert time.monotonic() < deadline, "the headless session never asked"
            time.sleep(0.5)
        viewer = pexpect.spawn(AUTORL[0], [*AUTORL[1:], "tui", "headless"], cwd=str(REPO),
                               env={**os.environ, "TERM": "xterm-256color"}, dimensions=(40, 140), timeout=120,
                               encoding="utf-8")
        try:
            viewer.expect("hyperparameter")
            viewer.send("a")
            viewer.expect("session finished")
            viewer.send("q")
            viewer.expect(pexpect.EOF)
        finally:
            viewer.close(force=True)
        output, _ = session.communicate(timeout=120)
        assert session.returncode == 0, output
        assert "waits for a decision: autorl tui headless" in output
    finally:
        session.kill()
    data = json.loads(run_cli("show", "headless", "--json").stdout)
    assert data["status"] == "finished" and data["nodes"][0]["status"] == "succeeded"
