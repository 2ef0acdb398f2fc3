"""The controller's side of a warm worker: start it, hand it runs, replace it when lost.

One worker per session imports the heavy stack once (see ``sandbox/zygote.py``); each run
is a fork of it, isolated as a cold run would be, so a stage pays for its training and its
evaluation but not for ``import torch``. Launching through the worker is an optimisation
the sandbox may always decline: a run whose paths the worker cannot show, a worker that is
not ready, stale (the packages or the frozen folders it imported from changed) or lost,
falls back to a cold start, and the run's result says which way it went and why.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sandbox import zygote
from sandbox.executor import TERM_GRACE_SECONDS, RunResult, parse_footer

READY_SECONDS = 300.0  # importing the stack on a loaded machine
REPLY_SECONDS = 20.0  # a fork and a handshake
POLL_SECONDS = 0.05
WORKER_KINDS = ("warm", "cold")


class WorkerLost(Exception):
    """The worker (not the run) failed: it died, hung or could not start."""


def interpreter_paths() -> list[str]:
    """The Python install and venv every run needs: a run sees them even where they lie under a
    folder each run gets fresh (a venv under /tmp), as a cold run under bubblewrap does."""
    return sorted({sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parents[1])})


@dataclass
class WorkerPlan:
    """What a worker imports and which paths it can show its runs.

    ``hidden_roots`` are folders the worker sees whole (writable) but each run sees only
    its own paths of; ``visible`` are read-only folders every run may see whole (the
    workspace); ``watch`` are the files and folders whose change makes the worker stale.
    """

    preload: list[dict] = field(default_factory=list)  # [{"paths": [...], "modules": [...], "names": {m: [...]}}]
    allowed_roots: list[Path] = field(default_factory=list)
    hidden_roots: list[Path] = field(default_factory=list)
    visible: list[Path] = field(default_factory=list)
    watch: list[Path] = field(default_factory=list)
    home: Path = Path("/tmp")


def fingerprint(watch: list[Path]) -> tuple:
    """Cheap signature of what a worker imported: the stat of every watched file and of
    every ``sys.path`` folder (installing or removing a package changes its folder)."""
    signature = []
    for root in [*map(Path, sys.path), *watch]:
        try:
            paths = [root, *sorted(root.rglob("*"))] if root.is_dir() and root in watch else [root]
            for path in paths:
                st = path.stat()
                signature.append((str(path), st.st_size, st.st_ino, st.st_mtime_ns))
        except OSError:
            continue
    return tuple(signature)


class WarmWorker:
    """One zygote process, started under the session's sandbox tier."""

    def __init__(self, plan: WorkerPlan, command: Callable[[list[str], dict[str, str]], list[str]],
                 env: dict[str, str], isolate: bool, drop_uid: bool):
        self.plan = plan
        self.command = command  # wraps the worker's argv in the tier (bwrap, or setpriv's parent-death signal)
        self.env = env
        self.isolate = isolate
        self.drop_uid = drop_uid
        self.process: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.ready_report: dict | None = None
        self.host_pid: int | None = None
        self.stamp: tuple = ()
        self.log_path = plan.home / "worker.log"
        self.starts = 0
        self.lock = threading.Lock()  # one request on the control socket at a time
        self.active = 0  # runs forked and not yet ended

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Launch the worker; it imports in the background until ``wait_ready``. Nothing runs in
        the child before exec: the tier's command carries the parent-death signal."""
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        package = Path(zygote.__file__).resolve().parent
        config = {"preload": self.plan.preload, "allowed_roots": [str(p) for p in self.plan.allowed_roots],
                  "own_paths": [str(package.parent)]}
        boot = f"import sys; sys.path.insert(0, {str(package.parent)!r}); from sandbox.zygote import main; main()"
        argv = self.command([sys.executable, "-c", boot, str(theirs.fileno()), json.dumps(config)], self.env)
        self.plan.home.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, env=self.env, cwd=self.plan.home, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, pass_fds=(theirs.fileno(),),
                                            start_new_session=True)
        theirs.close()
        self.control, self.ready_report, self.host_pid = ours, None, None
        self.stamp = fingerprint(self.plan.watch)
        self.starts += 1

    def wait_ready(self, timeout: float = READY_SECONDS) -> dict:
        if self.ready_report is None:
            if self.control is None:
                raise WorkerLost("not started")
            message, pid = self._receive(self.control, timeout)
            if not message or not message.get("ready"):
                raise WorkerLost(f"did not start: {message or self._log_tail()}")
            self.ready_report, self.host_pid = message, pid
        return self.ready_report

    def stale(self) -> bool:
        return fingerprint(self.plan.watch) != self.stamp

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            _kill_group(self.process.pid)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
            self.process = None

    # -- runs ---------------------------------------------------------------------------------

    def covers(self, argv: list[str], mounts) -> bool:
        """Whether this worker can run ``argv`` with ``mounts``: a Python script, every
        writable path under a hidden root, every read-only one under a hidden root or a
        folder the worker shows whole."""
        if len(argv) < 2 or argv[0] != sys.executable or not argv[1].endswith(".py"):
            return False
        under = lambda path, roots: any(Path(path).resolve().is_relative_to(r.resolve()) for r in roots)  # noqa: E731
        return (all(under(p, self.plan.hidden_roots) for p in mounts.writable)
                and all(under(p, self.plan.hidden_roots + self.plan.visible) for p in mounts.read_only))

    def run(self, argv: list[str], cwd: Path, wall_seconds: float, env: dict[str, str], mounts, stdout_path: Path,
            stderr_path: Path, gpu: str | None, all_gpus: list[str], on_started: Callable[[int], None],
            on_poll: Callable[[], None] | None = None) -> RunResult:
        """Fork one run from the worker and wait for it like ``LocalExecutor.run``.

        ``on_started`` gets the run's host PID before it may start (the cgroup is joined
        there). Raises WorkerLost when the worker, not the run, failed.
        """
        started = time.monotonic()
        ours = self._fork(argv, cwd, env, mounts, gpu, all_gpus, stdout_path, stderr_path)
        try:
            hello, monitor_pid = self._receive(ours, REPLY_SECONDS)
            if not hello or not hello.get("ready") or monitor_pid is None:
                raise WorkerLost(f"run did not start: {hello}")
            on_started(monitor_pid)
            zygote.send(ours, {"go": True})
            returncode, timed_out, strays = self._wait(ours, monitor_pid, started + wall_seconds, on_poll)
            _wait_gone(monitor_pid, TERM_GRACE_SECONDS)  # not counted as a process the run left behind
        except BaseException:
            ours.close()
            raise
        finally:
            with self.lock:
                self.active -= 1
        ours.close()
        result = RunResult(returncode, timed_out, time.monotonic() - started, stdout_path, stderr_path,
                           parse_footer(stdout_path.read_text(errors="replace")))
        result.strays, result.worker = strays, "warm"
        return result

    def _fork(self, argv, cwd, env, mounts, gpu, all_gpus, stdout_path: Path, stderr_path: Path) -> socket.socket:
        """Ask the worker for one run and return the run's own channel. Runs side by side
        (``--parallel``) share the control socket, so a request and its reply go as one; a
        stale worker is replaced only when none of its runs is still going (replacing it
        would kill them)."""
        with self.lock:
            if not self.alive() or (self.stale() and not self.active):
                self.start()
            self.wait_ready()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
                try:
                    zygote.send(self.control, self._request(argv, cwd, env, mounts, gpu, all_gpus),
                                [theirs.fileno(), out.fileno(), err.fileno()])
                except OSError as exc:
                    ours.close()
                    raise WorkerLost(f"control socket: {exc}") from exc
                finally:
                    theirs.close()
            reply, _ = self._receive(self.control, REPLY_SECONDS)
            if not reply or "forked" not in reply:
                ours.close()
                raise WorkerLost(f"no fork: {reply or self._log_tail()}")
            self.active += 1
            return ours

    def _request(self, argv, cwd, env, mounts, gpu, all_gpus) -> dict:
        resolve = lambda paths: [str(Path(p).resolve()) for p in paths]  # noqa: E731
        return {"argv": argv, "cwd": str(cwd), "env": env, "isolate": self.isolate, "drop_uid": self.drop_uid,
                "writable": resolve(mounts.writable), "read_only": resolve(mounts.read_only),
                "hidden_roots": resolve(self.plan.hidden_roots),
                "visible": resolve(self.plan.visible) + interpreter_paths(),
                "hidden_procs": [HOST_PROC],
                "hidden_devices": [f"/dev/nvidia{g}" for g in all_gpus if g != gpu]}

    def _wait(self, channel: socket.socket, monitor_pid: int, deadline: float, on_poll) -> tuple:
        """Until the run reports its exit: (returncode, timed_out, strays)."""
        timed_out = False
        try:
            while True:
                if time.monotonic() >= deadline and not timed_out:
                    timed_out = True
                    self._terminate(monitor_pid, channel)
                readable, _, _ = select.select([channel], [], [], POLL_SECONDS)
                if on_poll:
                    on_poll()
                if readable:
                    message, _ = zygote.receive(channel)
                    if message is None:  # every holder of the channel is gone without a word
                        if timed_out:
                            return -signal.SIGKILL, True, 0
                        raise WorkerLost("the run's monitor vanished without reporting an exit status")
                    if "error" in message:
                        raise WorkerLost(f"could not isolate the run: {message['error'].strip().splitlines()[-1]}")
                    if "exit" in message:
                        _drain(channel, TERM_GRACE_SECONDS)  # the monitor is gone when the channel closes
                        return message["exit"], timed_out, int(message.get("strays", 0))
        except BaseException:  # Ctrl-C, SIGTERM: the run goes down with the stop
            _kill_group(monitor_pid)
            raise

    @staticmethod
    def _terminate(monitor_pid: int, channel: socket.socket) -> None:
        """SIGTERM the run (the monitor forwards it), then SIGKILL its whole group."""
        _kill_group(monitor_pid, signal.SIGTERM)
        readable, _, _ = select.select([channel], [], [], TERM_GRACE_SECONDS)
        if not readable:
            _kill_group(monitor_pid, signal.SIGKILL)

    @staticmethod
    def _receive(sock: socket.socket, timeout: float) -> tuple[dict | None, int | None]:
        """One message and the sender's PID as the kernel saw it (SO_PASSCRED)."""
        readable, _, _ = select.select([sock], [], [], timeout)
        if not readable:
            raise WorkerLost(f"no answer within {timeout:.0f}s")
        try:
            data, ancillary, _, _ = sock.recvmsg(zygote.MAX_MESSAGE, socket.CMSG_SPACE(12))
        except OSError as exc:
            raise WorkerLost(str(exc)) from exc
        pid = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", payload[:12])[0]
        return (json.loads(data) if data else None), pid

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no worker log"
        return (lines or ["worker exited"])[-1][:300]


HOST_PROC = "/run/autorl-host-proc"  # the host /proc, shown to the worker only so runs may mount their own


def _drain(channel: socket.socket, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        readable, _, _ = select.select([channel], [], [], max(0.0, deadline - time.monotonic()))
        if not readable or zygote.receive(channel)[0] is None:
            return


def _wait_gone(pid: int, seconds: float) -> None:
    """Until ``pid`` has exited (gone, or a zombie its parent has yet to reap)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.01)


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
