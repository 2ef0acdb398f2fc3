"""Hostile runs, one per property, against each sandbox tier this machine offers, each
started cold (a fresh interpreter) and warm (forked from the session's worker).

Tier A (bubblewrap) must block every attack. Tier D (no namespaces) must bound time,
memory and processes and detect tampering; what it cannot stop (network, host sockets,
files readable by this user) it must say it does not guarantee. A warm start must
guarantee all a cold one does, and leave the worker untouched by the runs it serves.
"""

import ast
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, wait_until

from autorl.stages.frozen import FrozenGuard, run_guarded
from sandbox import (
    BwrapSandbox,
    GpuPool,
    Limits,
    Mounts,
    Sandbox,
    SandboxError,
    bwrap_works,
    choose_sandbox,
    scrubbed_env,
    select_gpus,
)
from sandbox.cgroups import V1_CONTROLLERS, _v2_root
from sandbox.executor import LocalExecutor, setpriv_path
from sandbox.warm import WorkerPlan

BWRAP, WHY_NOT = bwrap_works()
WORKERS = ("cold", "warm")
TIERS = [pytest.param(f"{tier}-{worker}", marks=pytest.mark.skipif(tier == "bwrap" and not BWRAP, reason=WHY_NOT))
         for tier in ("bwrap", "none") for worker in WORKERS]
MARKER = "autorl-hostile-marker-7f3a"
SANDBOXES: list[Sandbox] = []


@pytest.fixture
def layout(tmp_path):
    """A workspace with a frozen env, a pristine copy, a run directory, and a secret outside it."""
    workspace, pristine, run_dir = tmp_path / "workspace", tmp_path / "pristine", tmp_path / "run"
    for folder in (workspace / "env", pristine, run_dir):
        folder.mkdir(parents=True)
    for folder in (workspace / "env", pristine):
        (folder / "task.py").write_text("ANSWER = 42\n")
    (tmp_path / "secret.txt").write_text(MARKER)
    guard = FrozenGuard.record(workspace / "env")
    return {"workspace": workspace, "pristine": pristine, "run": run_dir, "secret": tmp_path / "secret.txt",
            "guard": guard, "root": tmp_path}


def make_sandbox(tier: str, limits: Limits = Limits(memory_bytes=512 * 2**20, pids=64), layout: dict | None = None,
                 **kwargs) -> Sandbox:
    """``bwrap-warm`` and the like: the tier, and whether runs fork from a warm worker
    (which then serves the ``layout``'s run folder and shows its workspace)."""
    kind, _, worker = tier.partition("-")
    sandbox = BwrapSandbox(limits, **kwargs) if kind == "bwrap" else Sandbox(limits, **kwargs)
    if worker == "warm":
        plan = WorkerPlan(preload=[{"paths": [], "modules": ["json"]}], hidden_roots=[layout["run"]],
                          visible=[layout["workspace"]], watch=[layout["workspace"] / "env"],
                          home=layout["root"] / "worker")
        sandbox.start_worker(plan).wait_ready()
        SANDBOXES.append(sandbox)
    return sandbox


def run_hostile(sandbox: Sandbox, layout: dict, code: str, wall: float = 60, expect_warm: bool = True):
    """Run ``code`` as a script from the workspace, the run folder writable."""
    run_dir = layout["run"]
    script = layout["workspace"] / f"hostile_{time.monotonic_ns()}.py"
    script.write_text(textwrap.dedent(code))
    mounts = Mounts(read_only=[layout["workspace"]], writable=[run_dir])
    result = run_guarded(sandbox, layout["guard"], layout["pristine"], [sys.executable, str(script)],
                         cwd=run_dir, wall_seconds=wall, env=scrubbed_env(run_dir), mounts=mounts)
    if sandbox.worker is not None and expect_warm:
        assert result.worker == "warm", result.notes
    return result, result.stdout_path.read_text(), result.stderr_path.read_text()


@pytest.fixture(autouse=True)
def no_stray_processes():
    yield
    while SANDBOXES:
        SANDBOXES.pop().stop_worker()
    wait_until(lambda: not subprocess.run(["pgrep", "-f", MARKER], capture_output=True).stdout,
               "the test's processes are gone", timeout=10)


@pytest.mark.parametrize("tier", TIERS)
def test_write_into_the_frozen_env(tier, layout):
    task = layout["workspace"] / "env" / "task.py"
    result, out, err = run_hostile(make_sandbox(tier, layout=layout), layout, f"""
        import os
        path = {str(task)!r}
        os.chmod(path, 0o644)
        open(path, "w").write("ANSWER = 0  # pwned")
        print("wrote")
    """)
    assert task.read_text() == "ANSWER = 42\n"  # blocked, or put back
    if tier.startswith("bwrap"):
        assert "Read-only file system" in err and not result.ok
        assert result.violations == []
    else:
        assert "wrote" in out
        assert (result.violations and "env/task.py (modified)" in result.violations[0]
                and "restored" in result.violations[0])
        assert not result.ok and "frozen files changed" in result.failure_reason(60)


@pytest.mark.parametrize("tier", TIERS)
def test_tcp_connection_to_a_loopback_server(tier, layout):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    got, stop = [], threading.Event()
    thread = threading.Thread(target=lambda: got.append(_accept(server, stop)), daemon=True)
    thread.start()
    sandbox = make_sandbox(tier, layout=layout)
    _, out, _ = run_hostile(sandbox, layout, f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=5).sendall(b"{MARKER[:6]}")
            print("connected")
        except OSError as exc:
            print("blocked", exc)
    """)
    stop.set()  # the trial has ended: whatever was going to connect has connected
    thread.join(5)
    server.close()
    if tier.startswith("bwrap"):
        assert "blocked" in out and got == [None]
    else:  # the fallback tier says it leaves the network open; the server did receive the bytes
        assert "connected" in out and got == [MARKER[:6].encode()]
        assert not sandbox.guarantees()["no network, no host unix sockets"]


def _accept(server, stop):
    while not stop.is_set():
        try:
            connection, _ = server.accept()
        except socket.timeout:
            continue
        except OSError:
            return None
        connection.settimeout(5)
        return connection.recv(16)
    return None


@pytest.mark.parametrize("tier", TIERS)
def test_connect_to_a_host_unix_socket(tier, layout):
    path = layout["root"] / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)
    sandbox = make_sandbox(tier, layout=layout)
    _, out, _ = run_hostile(sandbox, layout, f"""
        import socket
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect({str(path)!r})
            print("connected")
        except OSError as exc:
            print("blocked", exc)
    """)
    server.close()
    if tier.startswith("bwrap"):
        assert "blocked" in out
    else:
        assert "connected" in out and not sandbox.guarantees()["no network, no host unix sockets"]


@pytest.mark.parametrize("tier", TIERS)
def test_secret_in_the_environment_and_in_proc_environ(tier, layout, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", MARKER)
    decoy = subprocess.Popen(["sleep", "30"], env={**os.environ, "CONTROLLER_SECRET": MARKER})  # a process holding it
    try:
        sandbox = make_sandbox(tier, layout=layout)
        _, out, _ = run_hostile(sandbox, layout, f"""
            import os, glob
            hits = [k for k, v in os.environ.items() if {MARKER!r} in v]
            for path in glob.glob("/proc/*/environ"):
                try:
                    if {MARKER!r}.encode() in open(path, "rb").read():
                        hits.append(path)
                except OSError:
                    pass
            print("hits", hits)
        """)
    finally:
        decoy.kill()
        decoy.wait()
    assert "OPENAI_API_KEY" not in out  # never in the trial's own environment, in any tier
    # tier A always hides it; tier D hides it exactly when it says so (a UID drop), and the test sees which
    assert ("hits []" in out) == sandbox.guarantees()["controller's environment and /proc hidden"]
    assert not tier.startswith("bwrap") or "hits []" in out


@pytest.mark.parametrize("tier", TIERS)
def test_read_a_secret_file_outside_the_run_dir(tier, layout):
    sandbox = make_sandbox(tier, layout=layout)
    _, out, _ = run_hostile(sandbox, layout, f"""
        try:
            print("read", open({str(layout["secret"])!r}).read())
        except OSError as exc:
            print("blocked", exc)
    """)
    # tier A always hides it; tier D hides it exactly when it says so (a UID drop; the file's folder is private)
    assert (MARKER not in out) == sandbox.guarantees()["secret files invisible"]
    assert not tier.startswith("bwrap") or "blocked" in out


needs_cgroups = pytest.mark.skipif(Sandbox(Limits()).cgroups is None, reason="no writable cgroup on this machine")


@needs_cgroups
@pytest.mark.parametrize("tier", TIERS)
def test_allocate_past_the_memory_limit(tier, layout):
    result, out, _ = run_hostile(make_sandbox(tier, layout=layout), layout, f"""
        # {MARKER}
        blocks = []
        for _ in range(64):
            blocks.append(bytearray(32 * 2**20))  # 2 GiB in all, against a 512 MiB limit
        print("allocated")
    """)
    assert "allocated" not in out
    assert result.oom_killed and "out of memory" in result.failure_reason(60)
    assert result.peak_memory_bytes and result.peak_memory_bytes <= 600 * 2**20


@pytest.mark.parametrize("tier", TIERS)
def test_a_setsid_child_left_sleeping_does_not_survive(tier, layout):
    pid_file = layout["run"] / "child.pid"
    result, _, _ = run_hostile(make_sandbox(tier, layout=layout), layout, f"""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                os.execvp("sleep", ["sleep", "1000", {MARKER!r}])
            os._exit(0)
        for _ in range(600):  # until the grandchild has written its pid
            if os.path.exists({str(pid_file)!r}) and open({str(pid_file)!r}).read():
                break
            time.sleep(0.05)
    """)
    assert result.ok and pid_file.exists()
    # the autouse fixture checks that `sleep 1000 <marker>` is gone


@pytest.mark.parametrize("tier", TIERS)
def test_running_past_the_wall_budget(tier, layout):
    result, _, _ = run_hostile(make_sandbox(tier, layout=layout), layout, f"""
        import time  # {MARKER}
        time.sleep(120)
    """, wall=2)
    assert result.timed_out and result.wall_seconds < 15
    assert "timed out after 2s" in result.failure_reason(2)


# -- launching: no Python in the child between fork and exec ------------------------------------

COLD_TIERS = [t for t in TIERS if t.values[0].endswith("-cold")]
ROOT = os.geteuid() == 0


def trial_cgroups(pid: int, version: str) -> set[str]:
    """The cgroup paths of ``pid`` (as the host sees them) in the hierarchies the sandbox limits."""
    paths = set()
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        limited = set(controllers.split(",")) & set(V1_CONTROLLERS)
        if (version == "v2" and number == "0") or (version == "v1" and limited):
            paths.add(path)
    return paths


def processes_with(token: str) -> dict[int, list[str]]:
    """Every process whose command line contains ``token``."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if entry.name.isdigit() and any(token in arg for arg in argv):
            found[int(entry.name)] = argv
    return found


def status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    return ""


@needs_cgroups
@pytest.mark.parametrize("tier", COLD_TIERS)
def test_a_cold_trial_starts_inside_its_cgroup_as_nobody_with_a_parent_death_signal(tier, tmp_path):
    """Every process of the trial, from bwrap (or, in tier D, the trial) on, is in the trial's
    cgroup in each limited hierarchy; tier D runs it as nobody with no extra groups and a
    parent-death signal. A shell script, so tier D may drop the UID whatever the interpreter."""
    sandbox = make_sandbox(tier)
    sandbox.drop_uid = ROOT  # as when the interpreter is readable by others
    run_dir, token = tmp_path / "run", f"{MARKER}-{uuid.uuid4().hex}"
    run_dir.mkdir()
    script = ('touch started; echo "ids $(id -u) $(id -g)"; i=0\n'
              'while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n'
              'exec setpriv --dump')
    seen: dict[int, tuple] = {}

    def look() -> None:  # from the controller while the trial holds
        if (run_dir / "started").exists() and not (run_dir / "release").exists():
            for pid, argv in processes_with(token).items():
                with contextlib.suppress(OSError):
                    seen[pid] = (argv, trial_cgroups(pid, sandbox.cgroups), status_field(pid, "Uid").split(),
                                 status_field(pid, "Groups"))
            (run_dir / "release").touch()

    result = sandbox.run(["/bin/sh", "-c", script, "trial", token], run_dir, 60, scrubbed_env(run_dir),
                         Mounts(writable=[run_dir]), on_poll=look)
    out = result.stdout_path.read_text()
    assert result.ok, result.stderr_path.read_text()
    assert len(seen) >= (3 if tier.startswith("bwrap") else 1)  # bwrap, its PID 1, the shell
    groups = {path for _, cgroups, _, _ in seen.values() for path in cgroups}
    assert len(groups) == 1 and groups.pop().startswith("/autorl/trial-"), seen
    if tier.startswith("none"):
        uid = "65534" if ROOT else str(os.getuid())
        assert all(set(uids) == {uid} for _, _, uids, _ in seen.values()), seen
        assert f"ids {uid} {uid if ROOT else os.getgid()}" in out
        if ROOT:
            assert all(extra == "" for _, _, _, extra in seen.values()) and "Supplementary groups: [none]" in out
        if setpriv_path():
            assert "Parent death signal: KILL" in out


def test_a_run_starts_only_after_the_controller_let_it_through_the_gate(tmp_path):
    """``on_started`` (the cgroup join) happens before any of the command runs; if it fails,
    the command never runs at all."""
    ran, before = tmp_path / "ran", []

    def on_started(pid: int) -> None:
        time.sleep(0.3)
        before.append(ran.exists())

    argv = ["/bin/sh", "-c", "touch ran"]
    result = LocalExecutor().run(argv, tmp_path, 10, scrubbed_env(tmp_path), on_started=on_started)
    assert result.ok and before == [False] and ran.exists()
    ran.unlink()

    def refuse(pid: int) -> None:
        raise OSError("cgroup.procs: refused")

    with pytest.raises(OSError, match="refused"):
        LocalExecutor().run(argv, tmp_path, 10, scrubbed_env(tmp_path), on_started=refuse)
    time.sleep(0.3)
    assert not ran.exists()


def test_the_sandbox_package_passes_no_preexec_fn():
    """The static half of the check below: no ``preexec_fn`` anywhere in ``sandbox/``."""
    for path in sorted((REPO / "sandbox").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            # a keyword or parameter (arg), a name (id), an attribute (attr), a string (**{"preexec_fn": ...})
            names = {getattr(node, field, None) for field in ("arg", "id", "attr", "value")}
            assert "preexec_fn" not in names, f"{path.name}:{node.lineno} uses preexec_fn"


_CHILD_HOOK = {"fd": None, "registered": False}


def _after_fork_in_child() -> None:
    if _CHILD_HOOK["fd"] is not None:
        os.write(_CHILD_HOOK["fd"], b"x")


@contextlib.contextmanager
def python_in_forked_children():
    """Counts the forked children of this process that ran Python before exec: CPython runs
    ``os.register_at_fork(after_in_child=...)`` hooks in a subprocess child only when it was
    given a ``preexec_fn`` (and in any ``os.fork`` child)."""
    if not _CHILD_HOOK["registered"]:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _CHILD_HOOK["registered"] = True
    read, write = os.pipe()
    os.set_blocking(read, False)
    _CHILD_HOOK["fd"] = write
    counted = [0]

    def count() -> int:
        with contextlib.suppress(BlockingIOError):
            counted[0] += len(os.read(read, 1 << 16))
        return counted[0]

    try:
        yield count
    finally:
        _CHILD_HOOK["fd"] = None
        os.close(write)
        os.close(read)


@contextlib.contextmanager
def busy_threads(count: int):
    """Threads that keep allocating, logging and taking locks, as a controller's do."""
    stop, log = threading.Event(), logging.getLogger("autorl.test.busy")
    log.addHandler(logging.NullHandler())
    log.propagate = False

    def churn() -> None:
        while not stop.is_set():
            json.loads(json.dumps([{"n": i, "s": "x" * 64} for i in range(200)]))
            log.warning("busy")
            with logging._lock:  # the lock a child forked mid-log would inherit held
                pass

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def test_no_python_runs_in_a_child_between_fork_and_exec_while_the_controller_has_busy_threads(layout):
    """Cold runs of every tier started from several threads at once (``--parallel``) while
    other threads churn, and a warm worker's start: every one runs, and none of their
    children ran Python between fork and exec (``preexec_fn`` there can deadlock)."""
    cold = [make_sandbox(tier) for tier in ("bwrap-cold", "none-cold") if BWRAP or tier == "none-cold"]
    for sandbox in cold:
        sandbox.drop_uid = ROOT  # tier D exercises the UID drop too (the trial is a shell script)
    failures: list[str] = []

    def launch(thread: int) -> None:
        for index in range(5):
            sandbox = cold[(thread + index) % len(cold)]
            run_dir = layout["run"] / f"t{thread}-{index}"
            run_dir.mkdir()
            result = sandbox.run(["/bin/sh", "-c", "echo ran"], run_dir, 30, scrubbed_env(run_dir),
                                 Mounts(writable=[run_dir]))
            if not (result.ok and result.stdout_path.read_text() == "ran\n"):
                failures.append(f"{sandbox.tier} {run_dir.name}: {result.failure_reason(30)}")

    with busy_threads(4), python_in_forked_children() as python_ran:
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)  # the detector sees this one
        assert python_ran() == 1
        launchers = [threading.Thread(target=launch, args=(thread,)) for thread in range(4)]
        for thread in launchers:
            thread.start()
        for thread in launchers:
            thread.join(120)
        warm = make_sandbox(f"{cold[0].tier}-warm", layout=layout)
        served, out, _ = run_hostile(warm, layout, "print('warm ran')")
        assert python_ran() == 1, "a launch ran Python in the forked child (preexec_fn or os.fork)"
    assert not any(thread.is_alive() for thread in launchers), "a launch hung"
    assert failures == [] and served.ok and "warm ran" in out


def named(name: str) -> list[int]:
    """The processes called ``name`` (``/proc/<pid>/comm``): a warm run keeps its worker's command line."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
    return found


def cgroup_dirs(pid: int) -> list[Path]:
    """The folders of the cgroups ``pid`` is in, in the hierarchies the sandbox limits."""
    version = Sandbox(Limits()).cgroups
    if version is None:
        return []
    if version == "v2":
        return [_v2_root() / path.lstrip("/") for path in trial_cgroups(pid, "v2")]
    dirs = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in set(controllers.split(",")) & set(V1_CONTROLLERS):
            dirs.append(Path("/sys/fs/cgroup", controller, path.lstrip("/")))
    return dirs


def remove_left_cgroups(groups: list[Path]) -> None:
    for group in groups:
        with contextlib.suppress(OSError, AssertionError):
            wait_until(lambda group=group: not (group / "cgroup.procs").read_text().strip(), "empty", timeout=10)
            group.rmdir()


@pytest.mark.parametrize("tier", TIERS)
def test_a_trial_dies_with_a_controller_killed_by_sigkill(tier, layout):
    """Nothing cleans up after a SIGKILLed controller: the parent-death signal (bwrap's
    --die-with-parent, setpriv's in tier D, the warm worker's own) must end its trials."""
    if tier == "none-cold" and setpriv_path() is None:
        pytest.skip("no setpriv --pdeathsig here: tier D says it cannot promise this")
    name = f"slp{uuid.uuid4().hex[:12]}"  # the trial's process name, found from the host
    trial = layout["workspace"] / "sleeper.py"
    trial.write_text(textwrap.dedent(f"""
        import ctypes, time
        ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0)  # PR_SET_NAME
        open("started", "w").close()
        time.sleep(600)
    """))
    controller = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from sandbox import BwrapSandbox, Limits, Mounts, Sandbox, scrubbed_env
        from sandbox.warm import WorkerPlan
        kind, worker = {tier!r}.split("-")
        sandbox = (BwrapSandbox if kind == "bwrap" else Sandbox)(Limits(memory_bytes=2**29, pids=64))
        run, workspace = Path({str(layout["run"])!r}), Path({str(layout["workspace"])!r})
        if worker == "warm":
            plan = WorkerPlan(hidden_roots=[run], visible=[workspace], home=Path({str(layout["root"] / "worker")!r}))
            sandbox.start_worker(plan).wait_ready()
        sandbox.run([sys.executable, {str(trial)!r}], run, 600, scrubbed_env(run),
                    Mounts(read_only=[workspace], writable=[run]))
    """)
    process = subprocess.Popen([sys.executable, "-c", controller], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    groups = []
    try:
        wait_until(lambda: (layout["run"] / "started").exists() and named(name), "the trial starts", timeout=60,
                   process=process)
        groups = [group for group in cgroup_dirs(named(name)[0]) if group.name.startswith("trial-")]
        assert len(groups) == len(cgroup_dirs(named(name)[0])), "the trial is outside its cgroup"
        process.kill()
        wait_until(lambda: not named(name), "the trial dies with its controller", timeout=10)
    finally:
        process.kill()
        process.communicate()
        for pid in named(name):  # only when the test failed
            os.kill(pid, 9)
        remove_left_cgroups(groups)  # the killed controller could not


def test_bwrap_command_line_for_a_trial_gpu_and_nested_read_only_checkpoint(tmp_path):
    sandbox = BwrapSandbox(Limits(), gpus=["0", "1"])
    run_dir = tmp_path / "node"
    env = sandbox.trial_env({"HOME": str(run_dir)}, "1")
    argv = sandbox.command(["python", "train.py"], run_dir, env,
                           Mounts(read_only=[tmp_path / "ws", run_dir / "checkpoint"], writable=[run_dir]), gpu="1")
    text = " ".join(argv)
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--cap-drop ALL", "--die-with-parent",
                 "--new-session", "--clearenv", "--uid 65534"):
        assert flag in text
    for device in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia1"):
        assert f"--dev-bind-try {device} {device}" in text
    assert "/dev/nvidia0" not in text  # the other GPU belongs to another trial
    assert "--setenv CUDA_VISIBLE_DEVICES 1" in text and "--ro-bind /sys /sys" in text
    # the writable run dir is bound before the read-only checkpoint inside it, so the checkpoint stays read-only
    assert text.index(f"--bind {run_dir} {run_dir}") < text.index(f"--ro-bind {run_dir / 'checkpoint'}")
    assert argv[-3:] == ["--", "python", "train.py"]
    no_gpu = " ".join(BwrapSandbox(Limits()).command(["x"], run_dir, sandbox.trial_env({}, None), Mounts()))
    assert "/dev/nvidia" not in no_gpu and "--setenv CUDA_VISIBLE_DEVICES  --" in no_gpu + " --"


def test_gpu_selection_and_one_gpu_per_running_trial():
    assert select_gpus("auto", visible=["0", "1"]) == ["0", "1"] and select_gpus("none", visible=["0"]) == []
    assert select_gpus("1,0,1", visible=["0", "1"]) == ["1", "0"]
    with pytest.raises(SandboxError, match="no GPU 2 on this machine; it has 0, 1"):
        select_gpus("2", visible=["0", "1"])
    with pytest.raises(SandboxError, match="it has none"):
        select_gpus("0", visible=[])
    with pytest.raises(SandboxError, match="use auto, none, or GPU indexes"):
        select_gpus("first", visible=["0"])
    pool = GpuPool(["0", "1"])
    with pool.lease() as first, pool.lease() as second, pool.lease() as third:
        assert (first, second, third) == ("0", "1", None)  # two trials, two GPUs; a third waits for none
    with pool.lease() as again:
        assert again == "0"


def test_a_trial_sees_only_its_gpu_in_its_environment(layout):
    sandbox = Sandbox(Limits(), gpus=["3"])
    result, out, _ = run_hostile(sandbox, layout, "import os; print('cuda', repr(os.environ['CUDA_VISIBLE_DEVICES']))")
    assert result.ok and "cuda '3'" in out
    result, out, _ = run_hostile(Sandbox(Limits()), layout,
                                 "import os; print('cuda', repr(os.environ['CUDA_VISIBLE_DEVICES']))")
    assert "cuda ''" in out


def test_choose_sandbox_names_what_it_picked():
    assert choose_sandbox("none").tier == "none"
    if BWRAP:
        assert choose_sandbox("auto").tier == "bwrap"
    else:
        warnings = []
        assert choose_sandbox("auto", notify=warnings.append).tier == "none" and "WITHOUT isolation" in warnings[0]


WARM_TIERS = [t for t in TIERS if t.values[0].endswith("-warm")]


@pytest.mark.parametrize("tier", WARM_TIERS)
def test_a_warm_run_can_neither_reach_the_worker_nor_leave_state_for_the_next_run(tier, layout):
    sandbox = make_sandbox(tier, layout=layout)
    worker_pid = sandbox.worker.process.pid
    leak = Path("/tmp") / f"leak-{MARKER}"
    hidden = sandbox.guarantees()["controller's environment and /proc hidden"]
    try:  # where the worker is not hidden (tier D without a UID drop) the run may kill it: it is replaced
        first, out, _ = run_hostile(sandbox, layout, expect_warm=hidden, code=f"""
            import json, os, signal
            json.POISONED = True
            open({str(leak)!r}, "w").write("left for the next run")
            for pid in filter(str.isdigit, os.listdir("/proc")):
                if int(pid) == os.getpid():  # a fork of the worker: its command line is the worker's
                    continue
                try:
                    if b"sandbox.zygote" in open(f"/proc/{{pid}}/cmdline", "rb").read():
                        os.kill(int(pid), signal.SIGKILL)
                        print("killed the worker")
                except OSError as exc:
                    print("refused", exc)
        """)
        assert first.ok
        if hidden:  # the worker is out of sight (tier A) or out of reach (another UID)
            assert sandbox.worker.alive() and sandbox.worker.process.pid == worker_pid
        second, out, _ = run_hostile(sandbox, layout, f"""
            import json, os
            print("poisoned", hasattr(json, "POISONED"), "leak", os.path.exists({str(leak)!r}))
        """)
        assert second.ok and "poisoned False" in out  # forked from the worker, not from the first run
        if tier.startswith("bwrap"):
            assert "leak False" in out
    finally:
        leak.unlink(missing_ok=True)


@pytest.mark.parametrize("tier", WARM_TIERS)
def test_a_warm_run_sees_only_its_own_folder_of_the_session(tier, layout):
    other = layout["run"] / "other-node"
    own = layout["run"] / "own-node"
    for folder in (other, own):
        folder.mkdir()
    (other / "secret.txt").write_text(MARKER)
    sandbox = make_sandbox(tier, layout=layout)
    script = layout["workspace"] / "peek.py"
    script.write_text(textwrap.dedent(f"""
        import os
        print("listing", sorted(os.listdir({str(layout["run"])!r})))
        try:
            print("read", open({str(other / "secret.txt")!r}).read())
        except OSError as exc:
            print("blocked", exc)
        open("mine.txt", "w").write("ok")
    """))
    result = sandbox.run([sys.executable, str(script)], own, 60, scrubbed_env(own),
                         Mounts(read_only=[layout["workspace"]], writable=[own]))
    out = result.stdout_path.read_text()
    assert result.ok and result.worker == "warm" and (own / "mine.txt").read_text() == "ok"
    if tier.startswith("bwrap"):
        assert "listing ['own-node']" in out and "blocked" in out and MARKER not in out


def run_while_killing_the_worker(sandbox, layout, attempts, retried):
    """A run held open until released; its worker is SIGKILLed (from outside) as soon as
    it starts, and only then is the run released, so the kill lands mid-run by construction."""
    script = layout["workspace"] / "slow.py"
    release = layout["run"] / "release"
    script.write_text(textwrap.dedent(f"""
        import os, time
        with open({str(attempts)!r}, "a") as handle:
            handle.write("attempt\\n")
        for _ in range(1200):
            if os.path.exists({str(release)!r}):
                break
            time.sleep(0.05)
        print("---")
        print("status: ok")
    """))
    attempts.unlink(missing_ok=True)
    release.unlink(missing_ok=True)
    if not sandbox.worker.alive():
        sandbox.worker.start()
    victim = sandbox.worker

    def kill_worker_once_started():
        wait_until(attempts.exists, "the run starts", timeout=60)
        os.killpg(victim.process.pid, 9)
        release.touch()

    killer = threading.Thread(target=kill_worker_once_started)
    killer.start()
    result = run_guarded(sandbox, layout["guard"], layout["pristine"], [sys.executable, str(script)],
                         cwd=layout["run"], wall_seconds=120, env=scrubbed_env(layout["run"]),
                         mounts=Mounts(read_only=[layout["workspace"]], writable=[layout["run"]]),
                         on_retry=lambda: retried.append(True))
    killer.join()
    return result


@pytest.mark.parametrize("tier", WARM_TIERS)
def test_a_worker_lost_mid_run_is_replaced_and_the_run_retried_cold(tier, layout):
    sandbox = make_sandbox(tier, layout=layout)
    attempts, retried = layout["run"] / "attempts", []
    result = run_while_killing_the_worker(sandbox, layout, attempts, retried)
    assert result.ok and result.footer == {"status": "ok"}
    assert result.worker == "cold (retry)" and "warm worker lost" in result.notes[0] and retried == [True]
    assert attempts.read_text().count("attempt") == 2
    again, _, _ = run_hostile(sandbox, layout, "print('fresh worker')")  # a new worker serves the next run
    assert again.ok and again.worker == "warm"


@pytest.mark.parametrize("tier", WARM_TIERS[:1])
def test_a_worker_lost_twice_in_a_row_leaves_the_session_cold(tier, layout):
    sandbox = make_sandbox(tier, layout=layout)
    attempts, retried = layout["run"] / "attempts", []
    first = run_while_killing_the_worker(sandbox, layout, attempts, retried)
    second = run_while_killing_the_worker(sandbox, layout, attempts, retried)
    assert first.ok and second.ok and retried == [True, True]
    assert "start cold from now on" in second.notes[0] and sandbox.worker is None
    later, _, _ = run_hostile(sandbox, layout, "print('cold now')", expect_warm=False)
    assert later.ok and later.worker == "cold"


@pytest.mark.parametrize("tier", WARM_TIERS)
def test_a_worker_whose_imports_changed_is_restarted_before_the_next_run(tier, layout):
    sandbox = make_sandbox(tier, layout=layout)
    first, _, _ = run_hostile(sandbox, layout, "print('one')")
    starts = sandbox.worker.starts
    time.sleep(0.01)
    (layout["workspace"] / "env" / "task.py").chmod(0o644)
    (layout["workspace"] / "env" / "task.py").write_text("ANSWER = 43\n")  # what the worker imported changed
    assert sandbox.worker.stale()
    layout["guard"].restore_from(layout["pristine"])
    second, out, _ = run_hostile(sandbox, layout, "print('two')")
    assert first.ok and second.ok and "two" in out and sandbox.worker.starts == starts + 1
