"""One controller per session: an advisory lock the kernel drops when its holder dies.

``flock`` on ``<session>/controller.lock`` is held for the whole run. A second
``research``/``resume`` on the same session fails at once with the holder's pid, and a
controller killed with SIGKILL leaves no stale lock behind (no lease to expire).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from autorl.errors import SessionError


class SessionLock:
    def __init__(self, session_dir: Path):
        self.path = session_dir / "controller.lock"
        self.handle = None

    def acquire(self) -> "SessionLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise SessionError(f"session {self.path.parent.name!r} is being run by another controller "
                               f"(pid {holder}); wait for it to end or stop it first") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self.handle = handle
        return self

    def held_elsewhere(self) -> bool:
        """True when a live controller holds the lock (used by `ls`; does not take it)."""
        if not self.path.exists():
            return False
        with self.path.open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None
