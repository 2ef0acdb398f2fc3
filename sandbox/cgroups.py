"""Per-trial control groups: memory, CPU and process-count limits, peak memory, OOM and kill-all.

Detected, not assumed: cgroup v2 is used where its mount offers the controllers, v1
where the per-controller hierarchies are writable (as on Firecracker VMs), and nothing
where neither is writable, in which case ``TrialCgroup.create`` returns None and the
caller says so.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None

    def describe(self) -> str:
        parts = []
        if self.memory_bytes:
            parts.append(f"memory {self.memory_bytes / 2**30:.1f} GiB")
        if self.cpus:
            parts.append(f"{self.cpus:g} CPUs")
        if self.pids:
            parts.append(f"{self.pids} processes")
        return ", ".join(parts) or "none"


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _v2_root() -> Path | None:
    """The cgroup2 mount if it offers the memory and pids controllers."""
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            root = Path(fields[1])
            controllers = ((root / "cgroup.controllers").read_text().split()
                           if (root / "cgroup.controllers").exists() else [])
            if {"memory", "pids"} <= set(controllers):
                return root
    return None


def detect() -> str | None:
    """'v2', 'v1' or None: which cgroup interface this process can create groups in."""
    if _v2_root() is not None and os.access(_v2_root(), os.W_OK):
        return "v2"
    if all(os.access(ROOT / c, os.W_OK) for c in V1_CONTROLLERS if (ROOT / c).is_dir()) and (ROOT / "memory").is_dir():
        return "v1"
    return None


class TrialCgroup:
    """One group per trial: created before launch, the trial's first process moved in by
    the controller before it runs anything (``add``), removed after."""

    def __init__(self, version: str, dirs: dict[str, Path], limits: Limits):
        self.version = version
        self.dirs = dirs  # controller (v1) or "unified" (v2) -> directory
        self.limits = limits

    @classmethod
    def create(cls, name: str, limits: Limits) -> "TrialCgroup | None":
        version = detect()
        try:
            if version == "v2":
                return cls._create_v2(name, limits)
            if version == "v1":
                return cls._create_v1(name, limits)
        except OSError:
            return None
        return None

    @classmethod
    def _create_v1(cls, name: str, limits: Limits) -> "TrialCgroup":
        dirs = {}
        for controller in V1_CONTROLLERS:
            if (ROOT / controller).is_dir():
                path = ROOT / controller / "autorl" / name
                path.mkdir(parents=True, exist_ok=True)
                dirs[controller] = path
        if limits.memory_bytes and "memory" in dirs:
            _write(dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
            swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
            if swap.exists():
                _write(swap, str(limits.memory_bytes))
        if limits.pids and "pids" in dirs:
            _write(dirs["pids"] / "pids.max", str(limits.pids))
        if limits.cpus and "cpu" in dirs:
            _write(dirs["cpu"] / "cpu.cfs_period_us", "100000")
            _write(dirs["cpu"] / "cpu.cfs_quota_us", str(int(limits.cpus * 100000)))
        return cls("v1", dirs, limits)

    @classmethod
    def _create_v2(cls, name: str, limits: Limits) -> "TrialCgroup":
        root = _v2_root()
        parent = root / "autorl"
        parent.mkdir(exist_ok=True)
        for level in (root, parent):
            try:
                _write(level / "cgroup.subtree_control", "+memory +pids +cpu")
            except OSError:
                pass
        path = parent / name
        path.mkdir(exist_ok=True)
        if limits.memory_bytes:
            _write(path / "memory.max", str(limits.memory_bytes))
            if (path / "memory.swap.max").exists():
                _write(path / "memory.swap.max", "0")
        if limits.pids:
            _write(path / "pids.max", str(limits.pids))
        if limits.cpus and (path / "cpu.max").exists():
            _write(path / "cpu.max", f"{int(limits.cpus * 100000)} 100000")
        return cls("v2", {"unified": path}, limits)

    def add(self, pid: int) -> None:
        """Move process ``pid`` into the group: in v1 into each controller's hierarchy. The
        process is a cold run held at the executor's gate or a warm worker's fork waiting
        for ``go``, so nothing of the trial runs outside the group."""
        for path in self.dirs.values():
            _write(path / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs.values():
            try:
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self) -> int:
        """SIGKILL every process left in the group; returns how many there were."""
        left = self.pids()
        kill_file = self.dirs.get("unified", Path("/nonexistent")) / "cgroup.kill"
        if kill_file.exists():
            _write(kill_file, "1")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(left)

    def peak_memory_bytes(self) -> int | None:
        name = {"v1": "memory.max_usage_in_bytes", "v2": "memory.peak"}[self.version]
        path = self.dirs.get("memory", self.dirs.get("unified")) / name if self.dirs else None
        try:
            return int(path.read_text()) if path else None
        except (OSError, ValueError):
            return None

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this group for exceeding its memory limit."""
        try:
            if self.version == "v2":
                events = (self.dirs["unified"] / "memory.events").read_text()
            else:
                events = (self.dirs["memory"] / "memory.oom_control").read_text()
                if "oom_kill " not in events:  # old kernels: hitting the limit is the best sign
                    return int((self.dirs["memory"] / "memory.failcnt").read_text()) > 0
        except (OSError, KeyError, ValueError):
            return False
        counts = dict(line.split() for line in events.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", 0)) > 0

    def remove(self) -> None:
        self.kill_all()
        for path in self.dirs.values():
            try:
                path.rmdir()
            except OSError:
                pass
