"""The local executor: budgets, process groups, scrubbed environment, footers."""

import os
import sys
import time

from conftest import wait_until

from sandbox.executor import LocalExecutor, parse_footer, scrubbed_env


def run(tmp_path, code, wall=10.0, **kwargs):
    env = scrubbed_env(tmp_path)
    return LocalExecutor().run([sys.executable, "-c", code], cwd=tmp_path, wall_seconds=wall, env=env, **kwargs)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().split()[2] != "Z"


def test_footer_and_success(tmp_path):
    result = run(tmp_path, "print('log'); print('---'); print('status: ok'); print('steps: 3')")
    assert result.ok and result.footer == {"status": "ok", "steps": "3"}
    assert result.failure_reason(10) is None


def test_footer_missing():
    assert parse_footer("a\nb\n") == {}


def test_crash_reason_names_the_error(tmp_path):
    result = run(tmp_path, "raise ValueError('bad value 42')")
    assert not result.ok
    assert "exited with code 1" in result.failure_reason(10)
    assert "ValueError: bad value 42" in result.failure_reason(10)


def test_budget_kills_the_whole_group(tmp_path):
    code = (
        "import subprocess, time\n"
        "p = subprocess.Popen(['sleep', '300'])\n"
        "open('child.pid', 'w').write(str(p.pid))\n"
        "time.sleep(300)\n"
    )
    started = time.monotonic()
    result = run(tmp_path, code, wall=2.0)
    assert result.timed_out and "timed out" in result.failure_reason(2.0)
    assert time.monotonic() - started < 15
    child = int((tmp_path / "child.pid").read_text())
    wait_until(lambda: not pid_alive(child), "the budget's kill reaches the child", timeout=10)


def test_secrets_do_not_reach_the_trial(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-marker")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-marker")
    result = run(tmp_path, "import os; print('---'); print('env: ' + repr(sorted(os.environ)))")
    assert "OPENAI_API_KEY" not in result.footer["env"]
    assert "AWS_SECRET" not in result.footer["env"]
    assert "sk-secret-marker" not in result.stdout_path.read_text()


def test_poll_callback_runs_while_waiting(tmp_path):
    calls = []
    run(tmp_path, "import time; time.sleep(1)", on_poll=lambda: calls.append(1))
    assert len(calls) >= 2
