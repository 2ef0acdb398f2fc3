"""How a stage's files cross a Ray cluster whose nodes share no disk: the session's MLflow artifact store.

A cluster's nodes share the network, not a folder. The one place every node can reach is
the store the session already lives in: the artifact root of its tracking server (or S3,
GCS, Azure, or a folder the nodes mount). So a Ray job reads and writes there, through
MLflow's own artifact repositories, which stream file by file (a checkpoint is never whole
in memory), and nothing of a session is ever put in Ray's object store:

- the session's workspace, once per session, under the session run's ``stage_workspace/``;
- a stage's task (its spec and train.py) under its node run's ``jobs/<job>/task.json``;
- the parent checkpoint, where the parent's run keeps it (``checkpoint/``);
- the stage's steps, as ``jobs/<job>/metrics.jsonl``, uploaded again as they grow (the
  controller reads whole lines only, so the live view stays live and a line cut short is
  never taken);
- its outputs: the checkpoint to the node run's ``checkpoint/``, the logs and evaluation
  to ``jobs/<job>/out/``, and last ``jobs/<job>/stage_result.json``: a job whose result file
  is not there has no result, however much else it wrote.

benchmarks/cluster.py measures what a stage's transfers cost (results/cluster.json).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

COMPLETE = ".complete"  # written last: a folder without it was cut short


class RunFiles:
    """One run's artifacts, read and written through MLflow's repository for its artifact URI."""

    def __init__(self, artifact_uri: str, tracking_uri: str | None):
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        self.artifact_uri = artifact_uri.rstrip("/")
        self.tracking_uri = tracking_uri
        self.repository = get_artifact_repository(self.artifact_uri, tracking_uri=tracking_uri)

    def uri(self, path: str) -> str:
        return f"{self.artifact_uri}/{path}"

    def put_text(self, text: str, path: str) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            local = Path(scratch) / os.path.basename(path)
            local.write_text(text)
            self.repository.log_artifact(str(local), os.path.dirname(path) or None)

    def put_folder(self, local: Path, path: str, skip: tuple[str, ...] = ()) -> None:
        """Every file under ``local`` (parts named in ``skip`` left out), then ``.complete``."""
        for file in sorted(local.rglob("*")):
            relative = file.relative_to(local)
            if file.is_file() and not file.is_symlink() and not set(relative.parts) & set(skip):
                self.repository.log_artifact(str(file), f"{path}/{relative.parent}".rstrip("/."))
        self.put_text("", f"{path}/{COMPLETE}")

    def get_text(self, path: str) -> str | None:
        """The artifact's text, None while it does not exist."""
        with tempfile.TemporaryDirectory() as scratch:
            local = self.get(path, Path(scratch))
            return local.read_text() if local is not None else None

    def get(self, path: str, dest: Path) -> Path | None:
        """Download the artifact (a file or a folder) into ``dest``; None when it is not there."""
        dest.mkdir(parents=True, exist_ok=True)
        try:
            return Path(self.repository.download_artifacts(path, str(dest)))
        except Exception:  # noqa: BLE001 - each store says "not there" its own way (OSError, 404)
            return None

    def get_folder(self, path: str, dest: Path) -> bool:
        """A folder written by ``put_folder`` into ``dest``, only when it was written whole."""
        if self.get_text(f"{path}/{COMPLETE}") is None:
            return False
        partial = dest.with_name(dest.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        got = self.get(path, partial)
        if got is None:
            return False
        (got / COMPLETE).unlink(missing_ok=True)
        shutil.rmtree(dest, ignore_errors=True)
        got.rename(dest)
        shutil.rmtree(partial, ignore_errors=True)
        return True

    def exists(self, path: str) -> bool:
        folder, name = os.path.dirname(path), os.path.basename(path)
        try:
            return any(os.path.basename(entry.path) == name for entry in self.repository.list_artifacts(folder or None))
        except Exception:  # noqa: BLE001 - a folder not there is "not there"
            return False

    def delete(self, path: str) -> None:
        """Best effort: a store that cannot delete keeps a few small files."""
        try:
            self.repository.delete_artifacts(path)
        except Exception:  # noqa: BLE001 - gone already, or a store without deletes
            pass


def download_uri(uri: str, dest: Path, tracking_uri: str | None) -> Path:
    """Whatever ``uri`` names (a folder of a run's artifacts), downloaded into ``dest``."""
    from mlflow.artifacts import download_artifacts

    dest.mkdir(parents=True, exist_ok=True)
    return Path(download_artifacts(artifact_uri=uri, dst_path=str(dest), tracking_uri=tracking_uri))


def whole_lines(text: str | None) -> list[str]:
    """The lines of a file being uploaded again as it grows: a last line without its newline
    may be cut short, so it waits for the next upload."""
    if not text:
        return []
    lines = text.split("\n")
    return [line for line in lines[:-1] if line.strip()]


def node_folder() -> Path:
    """Where a job on this node works: ``AUTORL_NODE_DIR`` (set where the node's raylet
    starts), else a folder under the system's temp."""
    root = os.environ.get("AUTORL_NODE_DIR")
    return Path(root) if root else Path("/tmp") / f"autorl-node-{os.getuid()}"
