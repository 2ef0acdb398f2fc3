"""Which NVIDIA GPUs a session may use, and which one each running trial gets.

``--gpus auto`` takes every GPU ``nvidia-smi`` lists, ``none`` none, ``0,1`` those
indexes (a GPU that is not there is an error, not a silent CPU run). A trial leases one
GPU for as long as it runs, so trials running side by side never share one.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from contextlib import contextmanager
from typing import Iterator

from sandbox.errors import SandboxError


def visible_gpus() -> list[str]:
    """Indexes of the GPUs ``nvidia-smi`` lists here (empty without a driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().isdigit()] if done.returncode == 0 else []


def select_gpus(spec: str, visible: list[str] | None = None) -> list[str]:
    """The GPU indexes ``--gpus`` names: ``auto`` (all visible), ``none``, or ``0,1``.

    >>> select_gpus("1", visible=["0", "1"])
    ['1']
    >>> select_gpus("auto", visible=[])
    []
    """
    spec = spec.strip().lower()
    if spec == "none":
        return []
    visible = visible_gpus() if visible is None else visible
    if spec == "auto":
        return list(visible)
    asked = [part.strip() for part in spec.split(",") if part.strip()]
    if not asked or not all(part.isdigit() for part in asked):
        raise SandboxError(f"--gpus {spec!r}: use auto, none, or GPU indexes such as 0,1")
    missing = [index for index in asked if index not in visible]
    if missing:
        have = ", ".join(visible) if visible else "none (nvidia-smi finds no GPU)"
        raise SandboxError(f"--gpus {spec}: no GPU {', '.join(missing)} on this machine; it has {have}")
    return list(dict.fromkeys(asked))


class GpuPool:
    """Hands each running trial one GPU of the session's, and takes it back after."""

    def __init__(self, gpus: list[str]):
        self.gpus = list(gpus)
        self._free = list(gpus)
        self._lock = threading.Lock()

    @contextmanager
    def lease(self) -> Iterator[str | None]:
        """One free GPU index, or None when the session has none (or all are busy)."""
        with self._lock:
            gpu = self._free.pop(0) if self._free else None
        try:
            yield gpu
        finally:
            if gpu is not None:
                with self._lock:
                    self._free.insert(0, gpu)
