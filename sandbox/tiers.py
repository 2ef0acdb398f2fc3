"""Where untrusted code runs: ``train.py`` (and all it imports or starts), and the
evaluator reading an untrusted checkpoint.

Tier A, ``bwrap`` (bubblewrap, Debian package ``bubblewrap``) isolates:
  - the filesystem: only an allow-list is visible — the Python install and venv, the
    workspace (train.py, the frozen ``env/``, the base model) and the starting checkpoint
    read-only, the node's run directory writable, a private ``/tmp``. Secret files,
    other nodes and host unix sockets are not there at all;
  - the network: a new, empty network namespace (no loopback to the host's services);
  - processes: new PID, IPC, UTS and user namespaces, UID 65534, all capabilities
    dropped, ``--die-with-parent``, ``--new-session``; the controller's ``/proc`` is
    invisible, and when the trial's first process ends every process it left dies;
  - the environment: an explicit scrubbed set, also for bwrap itself (``/proc/1/environ``).
Tier D, ``none`` (no namespaces available) only: a scrubbed environment, a new session,
a parent-death signal, a UID drop when root and the interpreter is readable by
others, and the frozen-file hash check after every run (restore and flag). The network,
host unix sockets and files readable by the controller's user stay open to the trial.
The parent-death signal comes from util-linux ``setpriv --pdeathsig KILL``; where that is
missing (util-linux older than 2.33) a controller killed by SIGKILL leaves its cold trials
running (one that stops normally still kills them; a warm worker and its forks set the
signal themselves once started).

Integrity of the frozen files (hashing, restoring) is the caller's policy, not this
layer's: under bubblewrap they are read-only mounts, in the fallback tier the caller
must check them after each run.

Both tiers: a per-trial cgroup where one can be created (memory, CPU, process-count
limits; peak memory; OOM detection; killing every process left behind), a wall-clock
kill, and a sweep for escaped children. Neither tier limits disk space or hides the CPU
model. GPUs are passed through only when the session has some (``gpus``), one GPU per
running trial: its device node (tier A) and ``CUDA_VISIBLE_DEVICES`` (both tiers; empty
when the trial has none, so CUDA sees nothing).

A cold run is launched with no Python in the child between fork and exec (the controller
has threads): Popen starts the new session and, in tier D, drops the UID; the child waits
at the executor's shell gate while the controller writes its PID into the trial's
cgroup (each v1 controller's ``cgroup.procs``, or the v2 group's), so bwrap, or in tier D
``setpriv`` and the trial, start inside it (see ``sandbox/executor.py``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sandbox.cgroups import Limits, TrialCgroup
from sandbox.cgroups import detect as detect_cgroups
from sandbox.errors import SandboxError
from sandbox.executor import LocalExecutor, RunResult, die_with_parent, scrubbed_env
from sandbox.gpus import GpuPool
from sandbox.warm import HOST_PROC, WarmWorker, WorkerLost, WorkerPlan, interpreter_paths

SANDBOX_KINDS = ("auto", "bwrap", "none")
NOBODY = 65534
PR_SET_CHILD_SUBREAPER = 36
DEFAULT_LIMITS = Limits(memory_bytes=8 * 2**30, pids=512)
MAX_WORKER_LOSSES = 2
GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia-caps")


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # torch's intra-op threads follow OMP_NUM_THREADS


@dataclass
class Mounts:
    """What a run may see besides the system: read-only paths and writable paths."""

    read_only: list[Path] = field(default_factory=list)
    writable: list[Path] = field(default_factory=list)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)


def readable_by_others(path: Path) -> bool:
    """Whether a non-root user could read ``path``: every ancestor searchable, the file readable."""
    path = path.resolve()
    for ancestor in reversed(path.parents):
        if not ancestor.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IROTH)


class Sandbox:
    """Tier D: the fallback that bounds and detects but does not isolate."""

    tier = "none"

    def __init__(self, limits: Limits = DEFAULT_LIMITS, gpus: list[str] | None = None):
        self.limits = limits
        self.gpus = GpuPool(gpus or [])
        self.cgroups = detect_cgroups()
        self.drop_uid = os.geteuid() == 0 and readable_by_others(Path(sys.executable))
        self.executor = LocalExecutor()
        self.worker: WarmWorker | None = None
        self.worker_losses = 0  # in a row; at MAX_WORKER_LOSSES runs start cold for the rest of the session
        self.running = 0  # runs going now (several with --parallel)
        self.running_lock = threading.Lock()
        if self.cgroups is None:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a trial become ours, so the sweep finds them

    @property
    def trial_uid(self) -> int | None:
        """The UID runs get on the host: nobody where tier D drops root's, else ours (None)."""
        return NOBODY if self.drop_uid and self.tier == "none" else None

    # -- what it guarantees -------------------------------------------------------------------

    def guarantees(self) -> dict[str, bool]:
        return {
            "frozen env and evaluator read-only": False,
            "frozen env tampering detected and restored": True,
            "secret files invisible": self.drop_uid,
            "no network, no host unix sockets": False,
            "controller's environment and /proc hidden": self.drop_uid,
            "memory / process limits": self.cgroups is not None,
            "no process survives the trial": True,
            "wall-clock limit": True,
        }

    def describe(self) -> str:
        gpus = f"; GPUs {', '.join(self.gpus.gpus)} (one per running trial)" if self.gpus.gpus else "; no GPU"
        if self.tier == "none":
            return ("WARNING: tier D (no sandbox): trials share the host's network, unix sockets and files"
                    + ("" if self.drop_uid else " and run as this user") + "; tampering is only detected" + gpus)
        return "tier A (bubblewrap): allow-listed filesystem, no network, own PID/user namespaces" + gpus

    # -- running ------------------------------------------------------------------------------

    def command(self, argv: list[str], cwd: Path, env: dict[str, str], mounts: Mounts,
                gpu: str | None = None) -> list[str]:
        """``argv`` as this tier runs it: as it is, but killed when the controller dies."""
        return die_with_parent(argv)

    def trial_env(self, env: dict[str, str], gpu: str | None) -> dict[str, str]:
        """The trial's environment with only its own GPU visible to CUDA (none: empty), and
        as many compute threads as it has CPUs when its CPUs are limited."""
        threads = {name: str(max(1, int(self.limits.cpus))) for name in THREAD_VARIABLES} if self.limits.cpus else {}
        return {**env, **threads, "CUDA_VISIBLE_DEVICES": gpu or ""}

    # -- the warm worker --------------------------------------------------------------------

    def start_worker(self, plan: WorkerPlan) -> WarmWorker:
        """Start a warm worker that later runs are forked from (see ``sandbox/warm.py``);
        it imports in the background while the caller goes on."""
        for root in plan.hidden_roots:
            root.mkdir(parents=True, exist_ok=True)
        drop = self.trial_uid is not None
        home = Path("/tmp/autorl-home") if self.tier == "bwrap" else plan.home / "home"
        if drop:
            home.mkdir(parents=True, exist_ok=True)
            os.chown(home, NOBODY, NOBODY)
        env = self.trial_env(scrubbed_env(home), None)
        self.stop_worker()
        self.worker = WarmWorker(plan, lambda argv, env_: self.worker_command(argv, env_, plan), env,
                                 isolate=self.tier == "bwrap", drop_uid=drop)
        self.worker.start()
        return self.worker

    def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None

    def worker_command(self, argv: list[str], env: dict[str, str], plan: WorkerPlan) -> list[str]:
        return die_with_parent(argv)

    # -- running ------------------------------------------------------------------------------

    def run(self, argv: list[str], cwd: Path, wall_seconds: float, env: dict[str, str], mounts: Mounts,
            log_prefix: str = "", on_poll: Callable[[], None] | None = None,
            on_retry: Callable[[], None] | None = None) -> RunResult:
        """Run ``argv`` under this tier, then kill whatever it left running.

        Through the warm worker when there is one that can show the run its paths; if the
        worker (not the run) fails, ``on_retry`` clears what the attempt wrote and the run
        is retried once cold, its result saying so.
        """
        cgroup = TrialCgroup.create(f"trial-{uuid.uuid4().hex[:12]}", self.limits) if self.cgroups else None
        if self.trial_uid is not None:
            for path in mounts.writable:
                os.chown(path, NOBODY, NOBODY)
        with self.running_lock:
            self.running += 1
        try:
            with self.gpus.lease() as gpu:
                env = self.trial_env(env, gpu)
                result = self._launch(argv, cwd, wall_seconds, env, mounts, gpu, cgroup, log_prefix, on_poll,
                                      on_retry)
            result.tier = self.tier
            result.strays = cgroup.kill_all() if cgroup else self._sweep()
            if cgroup:
                result.peak_memory_bytes = cgroup.peak_memory_bytes()
                result.oom_killed = cgroup.oom_killed()
                result.memory_limit_bytes = self.limits.memory_bytes
        finally:
            with self.running_lock:
                self.running -= 1
            if cgroup:
                cgroup.remove()
        return result

    def _sweep(self) -> int:
        """Without cgroups: kill what was re-parented to us, but never a run still going
        beside this one (``--parallel``: the sweep waits for the last) nor the warm worker."""
        with self.running_lock:
            if self.running > 1:
                return 0
        keep = {self.worker.process.pid} if self.worker is not None and self.worker.process is not None else set()
        return sweep_orphans(keep)

    def _launch(self, argv, cwd, wall_seconds, env, mounts, gpu, cgroup, log_prefix, on_poll, on_retry) -> RunResult:
        lost = None
        if self.worker is not None and self.worker.covers(argv, mounts):
            try:
                result = self.worker.run(argv, cwd, wall_seconds, env, mounts, cwd / f"{log_prefix}stdout.log",
                                         cwd / f"{log_prefix}stderr.log", gpu, self.gpus.gpus,
                                         on_started=cgroup.add if cgroup else lambda pid: None, on_poll=on_poll)
                self.worker_losses = 0
                return result
            except WorkerLost as exc:
                lost = self._lose_worker(str(exc))
                if cgroup:
                    cgroup.kill_all()
                if on_retry:
                    on_retry()
        result = self.executor.run(self.command(argv, cwd, env, mounts, gpu), cwd, wall_seconds, env,
                                   log_prefix, on_poll, user=self.trial_uid, on_started=cgroup.add if cgroup else None)
        if lost:
            result.worker, result.notes = "cold (retry)", [lost]
        return result

    def _lose_worker(self, why: str) -> str:
        """Stop a worker that failed (the next run starts a new one), or, after
        ``MAX_WORKER_LOSSES`` in a row, go cold for good; says which."""
        self.worker_losses += 1
        self.worker.stop()
        if self.worker_losses >= MAX_WORKER_LOSSES:
            self.worker = None
            return (f"warm worker lost ({why}); retried cold, and runs start cold from now on "
                    f"({self.worker_losses} losses in a row)")
        return f"warm worker lost ({why}); retried cold"


class BwrapSandbox(Sandbox):
    """Tier A: bubblewrap over an allow-listed filesystem (see the module docstring)."""

    tier = "bwrap"

    def guarantees(self) -> dict[str, bool]:
        return {name: True for name in super().guarantees()} | {"memory / process limits": self.cgroups is not None}

    def system_binds(self) -> list[str]:
        args = ["--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin"]
        for path in ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/localtime", "/etc/ssl/certs"):
            args += ["--ro-bind-try", path, path]
        for prefix in interpreter_paths():
            args += ["--ro-bind", prefix, prefix]
        return args

    @staticmethod
    def gpu_binds(gpu: str | None) -> list[str]:
        """The trial's GPU: the driver's control nodes and its own device node (the node's
        minor number is taken to be the nvidia-smi index), and /sys read-only for the driver."""
        if gpu is None:
            return []
        args = []
        for device in (*GPU_DEVICES, f"/dev/nvidia{gpu}"):
            args += ["--dev-bind-try", device, device]
        return args + ["--ro-bind", "/sys", "/sys"]

    def worker_command(self, argv: list[str], env: dict[str, str], plan: WorkerPlan) -> list[str]:
        """The worker sees what any of its runs may see, each hidden root whole and
        writable (a run sees only its own paths in it), every session GPU, and the host
        ``/proc`` at a hidden path (the kernel lets a run mount its own ``/proc`` only when
        an unobstructed one is in view; each run covers it)."""
        from sandbox import zygote

        package = Path(zygote.__file__).resolve().parent
        mounts = Mounts(read_only=[*plan.visible, package], writable=[*plan.hidden_roots])
        devices = []
        for gpu in self.gpus.gpus:
            devices += self.gpu_binds(gpu)
        extra = ["--ro-bind", "/proc", HOST_PROC, *self._dedupe_binds(devices)]
        return self.command(argv, Path("/"), env, mounts, extra=extra)

    @staticmethod
    def _dedupe_binds(args: list[str]) -> list[str]:
        triples = [tuple(args[i:i + 3]) for i in range(0, len(args), 3)]
        return [part for triple in dict.fromkeys(triples) for part in triple]

    def command(self, argv: list[str], cwd: Path, env: dict[str, str], mounts: Mounts,
                gpu: str | None = None, extra: list[str] = ()) -> list[str]:
        args = [shutil.which("bwrap") or "bwrap", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
                "--cap-drop", "ALL",
                "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
                *self.system_binds()]
        writable = [Path(p).resolve() for p in mounts.writable]
        nested, outer = [], []
        for path in (Path(p).resolve() for p in mounts.read_only):
            (nested if any(w in path.parents for w in writable) else outer).append(path)
        for path in outer:
            args += ["--ro-bind", str(path), str(path)]
        for path in writable:
            args += ["--bind", str(path), str(path)]
        for path in nested:  # a read-only checkpoint inside a writable run directory
            args += ["--ro-bind", str(path), str(path)]
        args += self.gpu_binds(gpu) + list(extra) + ["--chdir", str(cwd), "--clearenv"]
        for key, value in sorted(env.items()):
            args += ["--setenv", key, value]
        return args + ["--", *argv]


def sweep_orphans(keep: set[int] = frozenset()) -> int:
    """Kill and reap processes that were re-parented to us (we are a subreaper in tier D),
    but not those in ``keep``."""
    me, killed = os.getpid(), 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and int(entry.name) != me and int(entry.name) not in keep:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                os.waitpid(int(entry.name), 0)
                killed += 1
            except (ProcessLookupError, ChildProcessError):
                pass
    return killed


def warm_works(sandbox: Sandbox) -> tuple[bool, str]:
    """Probe the warm path of ``sandbox``: start a worker (no preloads) in a scratch folder
    and run one script through it, isolated as a session's run would be."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="autorl-warm-probe-") as scratch:
        root = Path(scratch)
        for folder in ("workspace", "runs/run"):
            (root / folder).mkdir(parents=True)
        (root / "workspace" / "probe.py").write_text("print('warm ok')\n")
        run_dir = root / "runs" / "run"
        try:
            sandbox.start_worker(WorkerPlan(hidden_roots=[root / "runs"], visible=[root / "workspace"],
                                            home=root / "worker"))
            result = sandbox.run([sys.executable, str(root / "workspace" / "probe.py")], run_dir, 60,
                                 scrubbed_env(run_dir), Mounts(read_only=[root / "workspace"], writable=[run_dir]))
        finally:
            sandbox.stop_worker()
        said = result.stdout_path.read_text(errors="replace").strip()
    if result.worker == "warm" and result.ok and said == "warm ok":
        return True, "trials fork from a warm worker (--workers warm, the default)"
    return False, f"warm start failed ({'; '.join(result.notes) or said or 'no output'}); trials start cold"


def bwrap_works() -> tuple[bool, str]:
    """Probe bubblewrap once: installed, and able to create the namespaces we ask for."""
    if shutil.which("bwrap") is None:
        return False, "bwrap is not installed (apt-get install bubblewrap)"
    argv = BwrapSandbox(Limits()).command([sys.executable, "-c", "print('ok')"], Path("/tmp"), {"PATH": "/usr/bin"},
                                          Mounts())
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to start: {exc}"
    if done.returncode != 0 or done.stdout.strip() != "ok":
        return False, f"bwrap cannot create namespaces here: {(done.stderr or done.stdout).strip()[:200]}"
    return True, "ok"


def choose_sandbox(kind: str = "auto", limits: Limits = DEFAULT_LIMITS, gpus: list[str] | None = None,
                   notify: Callable[[str], None] | None = None) -> Sandbox:
    """The strongest tier that works (``auto``), or the one asked for; probed once per call."""
    if kind not in SANDBOX_KINDS:
        raise SandboxError(f"unknown sandbox {kind!r}; choose one of {', '.join(SANDBOX_KINDS)}")
    if kind == "none":
        return Sandbox(limits, gpus)
    works, why = bwrap_works()
    if works:
        return BwrapSandbox(limits, gpus)
    if kind == "bwrap":
        raise SandboxError(f"--sandbox bwrap: {why}")
    if notify:
        notify(f"WARNING: {why}; trials run WITHOUT isolation (tier D): network, host sockets and files are open")
    return Sandbox(limits, gpus)
