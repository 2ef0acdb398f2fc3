"""The frozen environment guard.

At session start the controller hashes every file under the workspace's ``env/``.
After every sandboxed run it hashes them again and puts back any changed file from the
template (the run is flagged); before every evaluation a change that is still there
stops scoring with a FrozenFileError, because a score from a tampered evaluator is
worthless. Under bubblewrap ``env/`` is mounted read-only, so the check should never
fire; in the fallback tier it is what makes tampering visible.
"""

from __future__ import annotations

import hashlib
import shutil
import stat
from pathlib import Path

from autorl.errors import FrozenFileError
from sandbox import RunResult, Sandbox


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(2**24):  # model weights can be many GB: stream them
            digest.update(chunk)
    return digest.hexdigest()


def hash_tree(root: Path, known: dict | None = None) -> dict[str, str]:
    """sha256 of every file under ``root``, keyed by relative path.

    ``known`` maps a path to its last (stat signature, hash): a file whose size, inode,
    mtime and ctime are unchanged is not read again. ctime cannot be set back by a
    process, so a write that restores the mtime still changes the signature.
    """
    hashes = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            relative = str(path.relative_to(root))
            stat_ = path.stat()
            signature = (stat_.st_size, stat_.st_ino, stat_.st_mtime_ns, stat_.st_ctime_ns)
            if known is not None and relative in known and known[relative][0] == signature:
                hashes[relative] = known[relative][1]
                continue
            hashes[relative] = file_hash(path)
            if known is not None:
                known[relative] = (signature, hashes[relative])
    return hashes


def make_read_only(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


class FrozenGuard:
    """Remembers the hashes of a frozen folder and checks them on demand."""

    def __init__(self, root: Path, expected: dict[str, str]):
        self.root = root
        self.expected = expected
        self._seen: dict = {}  # path -> (stat signature, hash): unchanged files are not re-read

    def current(self) -> dict[str, str]:
        return hash_tree(self.root, self._seen)

    @classmethod
    def record(cls, root: Path) -> "FrozenGuard":
        make_read_only(root)
        guard = cls(root, {})
        guard.expected = guard.current()
        return guard

    def changes(self) -> list[str]:
        actual = self.current()
        prefix = self.root.name
        changed = [f"{prefix}/{p} (modified)" for p in self.expected if p in actual and actual[p] != self.expected[p]]
        missing = [f"{prefix}/{p} (deleted)" for p in self.expected if p not in actual]
        added = [f"{prefix}/{p} (added)" for p in actual if p not in self.expected]
        return changed + missing + added

    def restore_from(self, pristine: Path) -> None:
        """Put the recorded files back from a pristine copy and remove added ones."""
        actual = self.current()
        for relative in set(actual) - set(self.expected):
            (self.root / relative).unlink()
        for relative, digest in self.expected.items():
            if actual.get(relative) != digest:
                target = self.root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    target.chmod(0o644)
                    target.unlink()
                shutil.copyfile(pristine / relative, target)
                target.chmod(0o444)
        self.check()

    def repair(self, pristine: Path | None) -> list[str]:
        """After a run: put back any changed file from ``pristine`` and say what the run did
        (empty when nothing changed). Without a pristine copy the change stays and is named."""
        changes = self.changes()
        if not changes:
            return []
        if pristine is None:
            return [f"frozen files changed: {', '.join(changes)} (not restored)"]
        self.restore_from(pristine)
        return [f"frozen files changed by the run: {', '.join(changes)} (restored from the template)"]

    def check(self, refused: str = "evaluation") -> None:
        changes = self.changes()
        if changes:
            raise FrozenFileError(
                f"{refused} refused: frozen files changed since the session started: "
                + ", ".join(changes)
                + f" (in {self.root.parent}); scores from a changed evaluator cannot be trusted"
            )


def run_guarded(sandbox: Sandbox, guard: FrozenGuard | None, pristine: Path | None, argv: list[str],
                refused: str = "launch", **run_args) -> RunResult:
    """Run ``argv`` in ``sandbox`` between two checks of the frozen files.

    A change from before the run is not the run's doing: it stops with a FrozenFileError.
    A change the run made is put back from ``pristine`` and recorded as a violation, so
    the run fails with the list of files it touched.
    """
    if guard is not None:
        guard.check(refused=refused)
    result = sandbox.run(argv, **run_args)
    if guard is not None:
        result.violations += guard.repair(pristine)
    return result
