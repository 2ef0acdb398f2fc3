"""The warm worker ("zygote"): imports the heavy stack once, then forks one process per run.

Started by ``sandbox/warm.py`` inside the session's sandbox tier, it imports what the
template's scripts import (torch, transformers, TRL, the frozen ``env`` modules…) and
then waits on its control socket. Each request (a script, its arguments, environment,
working directory and the paths it may see) is served by a fresh fork, so a run pays for
its own work and not for the imports; the worker itself never runs request code, and no
process that ran it is ever reused.

Each fork goes through three roles, all this module's code until the last:

  monitor  the worker's child. Sends ``ready`` on the run's own socket (the controller
           learns its host PID from the socket credentials and moves it into the run's
           cgroup), waits for ``go``, then, when isolating, enters new user, mount, PID,
           network, IPC, UTS and cgroup namespaces and narrows the worker's view to the
           run's paths: every hidden root is covered by an empty read-only tmpfs and only
           the run's own folders are bound back; ``/tmp`` and ``/dev/shm`` are fresh.
  init     PID 1 of the run's PID namespace (isolating only): mounts a ``/proc`` that
           shows only the run, hides the host ``/proc`` the kernel needed to allow that,
           forwards SIGTERM, reaps, and reports the run's exit status.
  run      drops every capability (or, without namespaces, its root UID), redirects its
           output to the run's log files, and executes the script as a fresh ``__main__``.

The worker is not dumpable, so a run under the same UID can neither ptrace it nor read
its memory, and it is a subreaper that kills any orphan a lost monitor left behind.
Standard library only: it must start before, and without, anything it preloads.
"""

from __future__ import annotations

import array
import atexit
import importlib
import importlib.util
import json
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from sandbox import namespaces as ns

NOBODY = 65534
MAX_MESSAGE = 1 << 20
NAMESPACES = (ns.CLONE_NEWUSER | ns.CLONE_NEWNS | ns.CLONE_NEWNET | ns.CLONE_NEWIPC | ns.CLONE_NEWUTS
              | ns.CLONE_NEWCGROUP | ns.CLONE_NEWPID)


# -- messages ---------------------------------------------------------------------------------

def send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([json.dumps(message).encode()], ancillary)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; ``(None, [])`` at end of stream."""
    space = socket.CMSG_SPACE(max_fds * 4) if max_fds else 0
    data, ancillary, _, _ = sock.recvmsg(MAX_MESSAGE, space)
    fds = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += array.array("i", payload[: len(payload) - len(payload) % 4]).tolist()
    return (json.loads(data) if data else None), fds


# -- the worker -------------------------------------------------------------------------------

def preload(entries: list[dict], allowed_roots: list[str]) -> dict:
    """Import each named module whose files lie under an allowed root (installed packages,
    frozen folders); a name that resolves anywhere else (say, a file a run left next to a
    script) is skipped, never imported."""
    started, loaded, skipped = time.monotonic(), [], {}
    roots = [Path(r).resolve() for r in allowed_roots]
    for entry in entries:
        sys.path[:0] = entry["paths"]
        for name in entry["modules"]:
            why = _import_if_trusted(name, roots)
            if not why and entry.get("names", {}).get(name):
                why = _load_names(name, entry["names"][name], roots)
            if why:
                skipped[name] = why
            else:
                loaded.append(name)
        del sys.path[: len(entry["paths"])]
    return {"seconds": round(time.monotonic() - started, 3), "loaded": loaded, "skipped": skipped}


def _load_names(module: str, names: list[str], roots: list[Path]) -> str | None:
    """Resolve ``from module import name``: lazy packages (transformers, TRL) import the
    real submodule only then, and that is most of their import time. A name that is a
    submodule (``from env import task``) is imported as one."""
    for name in names:
        try:
            getattr(sys.modules[module], name)
        except AttributeError:
            if why := _import_if_trusted(f"{module}.{name}", roots):
                return why
        except BaseException as exc:  # noqa: BLE001
            return f"{module}.{name}: {type(exc).__name__}: {exc}"
    return None


def _import_if_trusted(name: str, roots: list[Path]) -> str | None:
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if prefix in sys.modules:
            continue
        try:
            spec = importlib.util.find_spec(prefix)
        except Exception as exc:  # noqa: BLE001 - a parent package failed to import
            return f"{type(exc).__name__}: {exc}"
        if spec is None:
            return "not installed"
        locations = [spec.origin] if spec.origin not in (None, "built-in", "frozen", "namespace") else []
        locations += list(spec.submodule_search_locations or [])
        for location in locations:
            if not any(Path(location).resolve().is_relative_to(root) for root in roots):
                return f"resolves outside the installed packages and frozen folders ({location})"
        try:
            importlib.import_module(prefix)
        except BaseException as exc:  # noqa: BLE001 - a preload may fail; the run imports it again
            return f"{type(exc).__name__}: {exc}"
    return None


def serve(control: socket.socket, base_path: list[str]) -> None:
    """Fork a monitor per request until the controller closes the socket."""
    monitors: set[int] = set()
    last_sweep = time.monotonic()
    while True:
        readable, _, _ = select.select([control], [], [], 0.05)
        if reap(monitors) or time.monotonic() - last_sweep > 2.0:
            kill_orphans(monitors)
            last_sweep = time.monotonic()
        if not readable:
            continue
        request, fds = receive(control, max_fds=3)
        if request is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            control.close()
            monitor(request, *fds, base_path=base_path)  # never returns
        for fd in fds:
            os.close(fd)
        monitors.add(pid)
        send(control, {"forked": pid})


def reap(monitors: set[int]) -> bool:
    """Collect finished monitors; whether there were any."""
    reaped = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        monitors.discard(pid)
        reaped = True


def kill_orphans(monitors: set[int]) -> None:
    """Kill any child that is not a monitor: an orphan a lost monitor left, re-parented to us."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in monitors and _parent(entry) == os.getpid():
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _parent(proc_entry: Path) -> int:
    try:
        return int((proc_entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


# -- one run ----------------------------------------------------------------------------------

def monitor(request: dict, channel_fd: int, stdout_fd: int, stderr_fd: int, base_path: list[str]) -> None:
    channel = socket.socket(fileno=channel_fd)
    code = 70  # EX_SOFTWARE: the monitor itself failed
    try:
        os.setsid()
        ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)
        ns.prctl(ns.PR_SET_CHILD_SUBREAPER, 1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        send(channel, {"ready": True})
        go, _ = receive(channel)
        if not go or not go.get("go"):
            os._exit(0)  # the controller gave up on this run
        if request.get("isolate"):
            enter_namespaces(request)
        child = os.fork()
        if child == 0:
            if request.get("isolate"):
                become_init(request, channel, stdout_fd, stderr_fd, base_path)
            become_run(request, channel, stdout_fd, stderr_fd, base_path)
        signal.signal(signal.SIGTERM, lambda *_: _signal_quietly(child, signal.SIGTERM))
        status = _wait(child)
        if not request.get("isolate"):
            send(channel, {"exit": os.waitstatus_to_exitcode(status), "strays": sweep_children()})
        code = 0
    except BaseException:  # noqa: BLE001 - report, never fall back into the worker's loop
        traceback.print_exc()
        try:
            send(channel, {"error": traceback.format_exc(limit=3)[-2000:]})
        except OSError:
            pass
    os._exit(code)


def enter_namespaces(request: dict) -> None:
    """New namespaces for the run, and the worker's view narrowed to the run's paths."""
    ns.prctl(ns.PR_SET_DUMPABLE, 1)  # /proc/self/uid_map must be ours to write
    ns.unshare(NAMESPACES)
    ns.map_own_ids()
    ns.prctl(ns.PR_SET_DUMPABLE, 0)
    ns.mount(None, "/", None, ns.MS_REC | ns.MS_PRIVATE)
    fresh = [path for path in ("/tmp", "/dev/shm") if os.path.isdir(path)]
    hidden = [root for root in request["hidden_roots"] if not _under_any(root, fresh)]
    show(request, covered=fresh + hidden)
    for root in hidden:
        ns.remount_read_only(root)
    for device in request.get("hidden_devices", []):
        if os.path.exists(device):
            ns.mount("/dev/null", device, None, ns.MS_BIND)
    ns.loopback_up()


def show(request: dict, covered: list[str]) -> None:
    """Cover each folder in ``covered`` with an empty tmpfs, then bind back the run's own
    paths under them (shallowest first, so a read-only checkpoint inside a writable run
    folder stays read-only). Paths are bound from descriptors opened before the cover."""
    writable = {path: True for path in request["writable"]}
    wanted = {path: False for path in request["read_only"] + request.get("visible", [])} | writable
    paths = sorted((p for p in wanted if _under_any(p, covered) and os.path.exists(p)), key=lambda p: p.count("/"))
    opened = [(path, os.open(path, os.O_PATH)) for path in paths]
    for folder in covered:
        ns.tmpfs(folder)
    bound: list[str] = []
    for path, fd in opened:
        if not _under_any(path, bound):
            _make_mountpoint(path, fd)
        ns.bind_fd(fd, path, read_only=not wanted[path])
        os.close(fd)
        bound.append(path)


def _under_any(path: str, roots: list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _make_mountpoint(path: str, fd: int) -> None:
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).touch()


def become_init(request: dict, channel: socket.socket, stdout_fd: int, stderr_fd: int, base_path: list[str]) -> None:
    """PID 1 of the run's namespace: its own /proc, then the run as PID 2."""
    code = 70
    try:
        ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)  # the monitor's death ends the namespace
        ns.mount("proc", "/proc", "proc", ns.MS_NOSUID | ns.MS_NODEV | ns.MS_NOEXEC | ns.MS_RDONLY)
        for path in request.get("hidden_procs", []):
            ns.tmpfs(path, read_only=True)
        run = os.fork()
        if run == 0:
            become_run(request, channel, stdout_fd, stderr_fd, base_path)
        signal.signal(signal.SIGTERM, lambda *_: _signal_quietly(run, signal.SIGTERM))
        status = _wait(run)
        send(channel, {"exit": os.waitstatus_to_exitcode(status), "strays": 0})
        code = 0
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        try:
            send(channel, {"error": traceback.format_exc(limit=3)[-2000:]})
        except OSError:
            pass
    os._exit(code)  # PID 1 ends: the kernel kills whatever the run left in the namespace


def become_run(request: dict, channel: socket.socket, stdout_fd: int, stderr_fd: int, base_path: list[str]) -> None:
    """Shed everything the worker had, then execute the script as ``__main__``."""
    try:
        channel.close()
        _redirect(stdout_fd, stderr_fd)
        if request.get("isolate"):
            ns.drop_capabilities()
        elif request.get("drop_uid"):
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        os._exit(70)
    os._exit(execute(request["argv"], base_path))


def _redirect(stdout_fd: int, stderr_fd: int) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (stdout_fd, 1), (stderr_fd, 2)):
        os.dup2(source, target)
    os.closerange(3, 1 << 16)


def execute(argv: list[str], base_path: list[str]) -> int:
    """Run ``argv[1]`` as a fresh ``__main__`` with ``argv[1:]`` as ``sys.argv``, and exit the
    way an interpreter does: exit code, traceback, non-daemon threads joined, atexit run."""
    script = argv[1]
    sys.argv = argv[1:]
    sys.path[:] = [str(Path(script).resolve().parent), *base_path]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - the script's own failure, reported as Python would
        traceback.print_exc()
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _wait(pid: int) -> int:
    """Wait for ``pid``, reaping any other child (orphans re-parented to us) meanwhile."""
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        if done == pid:
            return status


def _signal_quietly(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def sweep_children() -> int:
    """Kill and reap what the run left behind (we are its subreaper)."""
    killed = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(entry) == os.getpid():
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                os.waitpid(int(entry.name), 0)
                killed += 1
            except (ProcessLookupError, ChildProcessError):
                pass
    return killed


def main(argv: list[str] | None = None) -> None:
    """``python -c 'from sandbox.zygote import main; main()' CONTROL_FD CONFIG_JSON``."""
    argv = sys.argv[1:] if argv is None else argv
    control = socket.socket(fileno=int(argv[0]))
    config = json.loads(argv[1])
    ns.prctl(ns.PR_SET_DUMPABLE, 0)
    ns.prctl(ns.PR_SET_CHILD_SUBREAPER, 1)
    ns.prctl(ns.PR_SET_PDEATHSIG, signal.SIGKILL)
    base_path = [p for p in sys.path if p and p not in config["own_paths"]]
    report = preload(config["preload"], config["allowed_roots"] + base_path)
    send(control, {"ready": True, **report})
    serve(control, base_path)
