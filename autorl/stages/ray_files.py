"""How a stage's files cross a Ray cluster whose nodes share no disk: Ray's object store.

Every Ray cluster has an object store, and nothing else can be counted on: nodes rented
by the hour share the network, not a folder, and the session's MLflow store is often a
SQLite file on the controller's disk. So a stage's inputs (the session's workspace once,
the parent checkpoint, the stage's train.py and spec) and its outputs (checkpoint,
metrics, logs, result) travel as tar archives through a *stash*: one detached actor per
session, on the head node, that owns the objects. Objects put by a job die with the job
(Ray's ownership); objects the stash puts live until the controller has taken them, so
a stage that ends while the controller is down is still there when it resumes. The
per-step metrics travel the same way, as lines appended by the job and read by the
controller while the stage trains (the live view stays live).

benchmarks/cluster.py measures what a stage's transfers cost (results/cluster.json).
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import ray

NAMESPACE = "autorl"
CHUNK_BYTES = 64 * 1024 * 1024  # one object per chunk: a multi-GB checkpoint never is one message


@ray.remote(num_cpus=0, max_restarts=0)
class Stash:
    """Blobs and metric lines by key, owned here so they outlive the job that made them."""

    def __init__(self):
        self.blobs: dict[str, list] = {}
        self.lines: dict[str, list[str]] = {}

    def put(self, key: str, index: int, chunk: bytes) -> None:
        self.blobs.setdefault(key, [])
        refs = self.blobs[key]
        refs.extend([None] * (index + 1 - len(refs)))
        refs[index] = ray.put(chunk)

    def chunks(self, key: str) -> list | None:
        """The object refs of a blob's chunks (the caller fetches them straight from the store)."""
        refs = self.blobs.get(key)
        return None if refs is None or any(r is None for r in refs) else list(refs)

    def append(self, key: str, lines: list[str]) -> int:
        self.lines.setdefault(key, []).extend(lines)
        return len(self.lines[key])

    def read(self, key: str, start: int) -> list[str]:
        return self.lines.get(key, [])[start:]

    def drop(self, prefix: str) -> int:
        """Forget everything under ``prefix`` (the store frees the objects)."""
        keys = [k for k in self.blobs if k.startswith(prefix)] + [k for k in self.lines if k.startswith(prefix)]
        for key in keys:
            self.blobs.pop(key, None)
            self.lines.pop(key, None)
        return len(keys)


def stash_name(session_key: str) -> str:
    return f"autorl-stash-{session_key}"


def open_stash(session_key: str, create: bool = True):
    """The session's stash: the running one, else (``create``) a new one on the head node."""
    name = stash_name(session_key)
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        if not create:
            raise
    head = {"node:__internal_head__": 0.001}  # on the head: the node a cluster loses last
    return Stash.options(name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
                         resources=head).remote()


def pack(entries: dict[str, Path], skip: tuple[str, ...] = ()) -> bytes:
    """A tar of ``{name in archive: path}`` (files or folders; names under ``skip`` left out)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, path in entries.items():
            if path.exists():
                archive.add(path, arcname=name, filter=lambda info: None if any(
                    part in skip for part in Path(info.name).parts) else info)
    return buffer.getvalue()


def unpack(blob: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as archive:
        archive.extractall(dest, filter="data")  # no absolute paths, links out or device files


def put_blob(stash, key: str, blob: bytes) -> None:
    chunks = [blob[i:i + CHUNK_BYTES] for i in range(0, len(blob), CHUNK_BYTES)] or [b""]
    ray.get([stash.put.remote(key, i, chunk) for i, chunk in enumerate(chunks)])


def has_blob(stash, key: str) -> bool:
    return ray.get(stash.chunks.remote(key)) is not None


def get_blob(stash, key: str) -> bytes | None:
    refs = ray.get(stash.chunks.remote(key))
    return None if refs is None else b"".join(ray.get(refs))


def node_folder() -> Path:
    """Where a job on this node works: ``AUTORL_NODE_DIR`` (set where the node's raylet
    starts), else a folder under the system's temp."""
    root = os.environ.get("AUTORL_NODE_DIR")
    return Path(root) if root else Path("/tmp") / f"autorl-node-{os.getuid()}"
