"""Run an untrusted command with a wall-clock budget and a scrubbed environment.

The local executor starts the command in its own session (process group) with an
allow-listed environment: no API keys or tokens reach it. Output goes to files (a
pipe plus a surviving grandchild can hang the reader). The controller, not the
command, enforces the budget: past it the whole process group gets SIGTERM, then
SIGKILL. What this does *not* do: filesystem, network or memory isolation.

The launch runs no Python in the child between fork and exec (``preexec_fn`` can
deadlock a child forked from a controller with threads): Popen itself starts the new
session and drops the UID (``user=``, ``group=``, ``extra_groups=[]``). Whatever must
happen to the process before any of the command runs (joining the trial's cgroup) is
done by the controller while the child waits at a gate: ``/bin/sh`` blocked reading its
stdin (a pipe), which execs the command only once ``on_started(pid)`` has returned and
the controller has written ``go``. A parent-death signal is set by util-linux
``setpriv --pdeathsig KILL`` exec'd in front of the command (``die_with_parent``).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Variables a trial may inherit; everything else (keys, tokens, proxies) is dropped.
ALLOWED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
               "OMP_NUM_THREADS", "MKL_NUM_THREADS")
TERM_GRACE_SECONDS = 5.0
POLL_SECONDS = 0.05
# Waits for one line on stdin (the controller's "go"), then execs its arguments with stdin
# from /dev/null and the environment it was given (the shell's own PWD unset); at end of
# file (the controller gave up or died) it exits without running them.
GATE_CLOSED = 125
GATE = ("/bin/sh", "-c", f'read -r _ || exit {GATE_CLOSED}; unset PWD; exec "$@" </dev/null', "autorl-gate")


def scrubbed_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an untrusted process: an allow-list plus offline switches."""
    env = {key: os.environ[key] for key in ALLOWED_ENV if key in os.environ}
    env.update(
        HOME=str(home),
        HF_HOME=str(home / ".hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        MPLCONFIGDIR=str(home / ".mpl"),
    )
    env.update(extra or {})
    return env


@dataclass
class RunResult:
    """What happened to one command."""

    returncode: int | None
    timed_out: bool
    wall_seconds: float
    stdout_path: Path
    stderr_path: Path
    footer: dict[str, str] = field(default_factory=dict)
    tier: str = "none"
    peak_memory_bytes: int | None = None
    memory_limit_bytes: int | None = None
    oom_killed: bool = False
    strays: int = 0  # processes left behind by the run and killed after it
    violations: list[str] = field(default_factory=list)  # what the run did that it must not
    worker: str = "cold"  # how it started: warm (forked from the worker), cold, or cold (retry)
    notes: list[str] = field(default_factory=list)  # what happened on the way (a lost worker…)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.violations

    @property
    def signal(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            return signal.Signals(-self.returncode).name
        return None

    def failure_reason(self, budget: float) -> str | None:
        """One line saying why the run failed, or None when it succeeded."""
        if self.violations:
            return "; ".join(self.violations)
        if self.timed_out:
            return f"timed out after {budget:.0f}s wall-clock budget (killed)"
        if self.oom_killed:
            limit = f" of {self.memory_limit_bytes / 2**30:.1f} GiB" if self.memory_limit_bytes else ""
            return f"out of memory: killed by the kernel at the trial's memory limit{limit}"
        if self.returncode != 0:
            how = f"killed by {self.signal}" if self.signal else f"exited with code {self.returncode}"
            return f"{how}: {last_error_line(self.stderr_path)}"
        return None


def last_error_line(path: Path, limit: int = 300) -> str:
    """The most telling line of a log: the last one that looks like an error."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if "Error" in line or "Exception" in line or "error:" in line]
    line = (errors or lines or ["no output"])[-1]
    return line[:limit]


def parse_footer(text: str) -> dict[str, str]:
    """``key: value`` lines after the last ``---`` line; empty when there is none.

    >>> parse_footer("noise\\n---\\nstatus: ok\\nsteps: 20\\n")
    {'status': 'ok', 'steps': '20'}
    """
    lines = text.splitlines()
    if "---" not in lines:
        return {}
    start = len(lines) - lines[::-1].index("---")
    footer = {}
    for line in lines[start:]:
        key, sep, value = line.partition(":")
        if sep:
            footer[key.strip()] = value.strip()
    return footer


class LocalExecutor:
    """Runs commands as subprocesses of the controller, one at a time."""

    name = "local"

    def run(
        self,
        argv: list[str],
        cwd: Path,
        wall_seconds: float,
        env: dict[str, str],
        log_prefix: str = "",
        on_poll: Callable[[], None] | None = None,
        user: int | None = None,
        on_started: Callable[[int], None] | None = None,
    ) -> RunResult:
        """Run ``argv`` to its end or its budget; ``user`` and ``on_started`` as in ``launch``."""
        stdout_path = cwd / f"{log_prefix}stdout.log"
        stderr_path = cwd / f"{log_prefix}stderr.log"
        started = time.monotonic()
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = launch(argv, cwd, env, out, err, user, on_started)
            try:
                timed_out = self._wait(process, started + wall_seconds, on_poll)
            except BaseException:  # Ctrl-C, SIGTERM: the trial goes down with the stop
                terminate(process)
                raise
        kill_group(process.pid)  # children left behind in the group go too
        wall = time.monotonic() - started
        footer = parse_footer(stdout_path.read_text(errors="replace"))
        return RunResult(process.returncode, timed_out, wall, stdout_path, stderr_path, footer)

    @staticmethod
    def _wait(process: subprocess.Popen, deadline: float, on_poll) -> bool:
        while process.poll() is None:
            if time.monotonic() >= deadline:
                terminate(process)
                return True
            if on_poll:
                on_poll()
            time.sleep(POLL_SECONDS)
        if on_poll:
            on_poll()
        return False


def launch(argv: list[str], cwd: Path, env: dict[str, str], out, err, user: int | None = None,
          on_started: Callable[[int], None] | None = None) -> subprocess.Popen:
    """Start ``argv`` in a new session, as ``user`` (its UID and GID, no other groups) when given.

    With ``on_started``, the child waits at ``GATE`` until ``on_started(pid)`` has returned,
    so what it does (say, move the pid into a cgroup) holds from the command's first
    instruction; if it raises, the child is killed before running anything.
    """
    ids = {"user": user, "group": user, "extra_groups": []} if user is not None else {}
    popen = dict(cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True, **ids)
    if on_started is None:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, **popen)
    gate, go = os.pipe()
    try:
        process = subprocess.Popen([*GATE, *argv], stdin=gate, **popen)
    except BaseException:
        os.close(go)
        raise
    finally:
        os.close(gate)
    with open(go, "wb", buffering=0) as gate_writer:  # closed without "go", the command never runs
        try:
            on_started(process.pid)
        except BaseException:
            kill_group(process.pid)
            process.wait()
            raise
        try:
            gate_writer.write(b"go\n")
        except BrokenPipeError:  # the child was killed at the gate; its exit status says so
            pass
    return process


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` behind util-linux ``setpriv --pdeathsig KILL``, which sets PR_SET_PDEATHSIG and
    execs it: it is killed when the controller thread that started it ends. Set there, after
    Popen's UID drop, since changing UID clears it. Unchanged where no ``setpriv`` knows
    ``--pdeathsig`` (util-linux 2.33 or later)."""
    setpriv = setpriv_path()
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else list(argv)


@functools.cache
def setpriv_path() -> str | None:
    """``setpriv`` if it is installed and knows ``--pdeathsig``; probed once."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    try:
        done = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return setpriv if done.returncode == 0 else None


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate(process: subprocess.Popen) -> None:
    """SIGTERM the process group, then SIGKILL it after a grace period."""
    kill_group(process.pid, signal.SIGTERM)
    try:
        process.wait(TERM_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        kill_group(process.pid, signal.SIGKILL)
        process.wait()
