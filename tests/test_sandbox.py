"""Hostile runs, one per property, against each sandbox tier this machine offers, each
started cold (a fresh interpreter) and warm (forked from the session's worker).

Tier A (bubblewrap) must block every attack. Tier D (no namespaces) must bound time,
memory and processes and detect tampering; what it cannot stop (network, host sockets,
files readable by this user) it must say it does not guarantee. A warm start must
guarantee all a cold one does, and leave the worker untouched by the runs it serves.
"""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import wait_until

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
