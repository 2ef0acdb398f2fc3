"""Checkpoints as run artifacts: a node's checkpoint lives in its MLflow run's artifact store.

The session folder is a cache. A stage writes its checkpoint there; once it is scored and
recorded, the checkpoint goes to the node's run under ``checkpoint/`` through MLflow's own
artifact repository (a local folder, a tracking server's artifact root, S3, GCS or Azure),
which copies or uploads it file by file, streamed, never whole in memory; then the cached
copy is removed. A stage that starts from it reads it where it lies when the store is a
local folder (nothing is copied, so no checkpoint is on this disk twice), and otherwise
downloads it once into the cache, under a temporary name until the download is whole.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from autorl.errors import CheckpointError

ARTIFACT = "checkpoint"
PARTIAL = ".partial"  # a download in progress: never taken for a checkpoint


class CheckpointStore:
    """Saves, fetches and deletes node checkpoints in the runs' artifact repositories."""

    def __init__(self, tracking_uri: str, client):
        self.tracking_uri = tracking_uri
        self.client = client  # the tracker's (retrying) MlflowClient
        self._repositories: dict[str, object] = {}

    def repository(self, run_id: str):
        """The artifact repository of ``run_id`` (MLflow picks it from the run's artifact URI)."""
        if run_id not in self._repositories:
            from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

            self._repositories[run_id] = get_artifact_repository(self.artifact_uri(run_id),
                                                                 tracking_uri=self.tracking_uri)
        return self._repositories[run_id]

    def artifact_uri(self, run_id: str) -> str:
        return self.client.get_run(run_id).info.artifact_uri

    def uri(self, run_id: str) -> str:
        """Where the run's checkpoint is, for a process elsewhere that fetches it (a Ray job)."""
        return f"{self.artifact_uri(run_id).rstrip('/')}/{ARTIFACT}"

    def local_folder(self, run_id: str) -> Path | None:
        """Where the run's checkpoint lies when its store is a folder on this machine."""
        from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

        repository = self.repository(run_id)
        if not isinstance(repository, LocalArtifactRepository):
            return None
        return Path(repository.artifact_dir) / ARTIFACT

    def save(self, run_id: str, folder: Path) -> None:
        """Log ``folder`` as the run's checkpoint, then drop the cached copy. Into a local store
        on the same filesystem it is moved (one rename, however large), else copied or
        uploaded by the store's repository."""
        local = self.local_folder(run_id)
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)  # a save cut short before: done again whole
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                folder.rename(local)
                return
            except OSError:  # another filesystem: the repository copies it
                pass
        self.repository(run_id).log_artifacts(str(folder), ARTIFACT)
        shutil.rmtree(folder, ignore_errors=True)

    def at_hand(self, run_id: str, cache: Path) -> Path | None:
        """The run's checkpoint as a folder on this machine without downloading it: the store's
        own when it is local, else ``cache`` once a fetch filled it (None: neither holds it)."""
        folder = self.local_folder(run_id) or cache
        return folder if (folder / "config.json").is_file() else None

    def fetch(self, run_id: str, cache: Path) -> Path:
        """A local folder holding the run's checkpoint: the store's own when it is local, else
        ``cache``, downloaded once (a download cut short is never taken for a checkpoint)."""
        if (found := self.at_hand(run_id, cache)) is not None:
            return found
        if (local := self.local_folder(run_id)) is not None:
            raise CheckpointError(f"run {run_id} has no checkpoint in its artifact store ({local})")
        partial = cache.with_name(cache.name + PARTIAL)
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            self.repository(run_id).download_artifacts(ARTIFACT, str(partial))
        except Exception as exc:  # noqa: BLE001 - every store raises its own kinds
            shutil.rmtree(partial, ignore_errors=True)
            raise CheckpointError(f"cannot fetch the checkpoint of run {run_id}: {exc}") from exc
        shutil.rmtree(cache, ignore_errors=True)
        (partial / ARTIFACT).rename(cache)
        shutil.rmtree(partial, ignore_errors=True)
        return cache

    def delete(self, run_id: str, cache: Path) -> None:
        """Delete the run's checkpoint from its store and from the cache (records stay)."""
        shutil.rmtree(cache, ignore_errors=True)
        try:
            self.repository(run_id).delete_artifacts(ARTIFACT)
        except Exception as exc:  # noqa: BLE001 - gone already is done; anything else is said
            if "RESOURCE_DOES_NOT_EXIST" not in str(getattr(exc, "error_code", "")) and "404" not in str(exc):
                raise CheckpointError(f"cannot delete the checkpoint of run {run_id}: {exc}") from exc
