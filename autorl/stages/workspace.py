"""The session workspace: a git repository copied from the template.

``train.py`` is the only file experiments change; every change is one commit, and every
node records the commit it ran, so any result can be reproduced with ``git checkout``.
"""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

import git

from autorl.stages.template import Template, copy_to

TRAIN_SCRIPT = "train.py"


class Workspace:
    def __init__(self, path: Path):
        self.path = path
        self.repo = git.Repo(path)

    @classmethod
    def create(cls, template: Template, path: Path) -> "Workspace":
        """Copy the template into ``path`` and commit it as the starting point."""
        copy_to(template, path)
        repo = git.Repo.init(path, initial_branch="main")
        with repo.config_writer() as config:
            config.set_value("user", "name", "autorl")
            config.set_value("user", "email", "autorl@localhost")
        # the base model's weights are frozen and hashed, never edited: keeping them out of git
        # saves a compressed copy of every (possibly multi-GB) model per session
        (path / ".gitignore").write_text(f"__pycache__/\n*.pyc\n{template.base_model_dir(path).relative_to(path)}/\n")
        repo.git.add(A=True)
        repo.index.commit(f"template {template.name}")
        return cls(path)

    @property
    def head(self) -> str:
        return self.repo.head.commit.hexsha

    @functools.cached_property
    def root_commit(self) -> str:
        return next(c.hexsha for c in self.repo.iter_commits(rev="HEAD") if not c.parents)

    @property
    def train_script(self) -> Path:
        return self.path / TRAIN_SCRIPT

    def train_script_at(self, commit: str) -> str:
        """``train.py`` as committed, byte for byte (``git show`` through GitPython drops the
        final newline, and an edit applied to that text would commit a file without one)."""
        return (self.repo.commit(commit).tree / TRAIN_SCRIPT).data_stream.read().decode()

    def checkout_train_script(self, commit: str) -> None:
        """Put ``train.py`` as it was at ``commit`` in the working tree."""
        self.repo.git.checkout(commit, "--", TRAIN_SCRIPT)

    def commit_train_script(self, text: str, message: str) -> str:
        """Write a new ``train.py``, commit it, and return the commit."""
        self.train_script.write_text(text)
        self.repo.index.add([TRAIN_SCRIPT])
        return self.repo.index.commit(message).hexsha

    def diff_from_template(self, commit: str) -> str:
        """Unified diff of ``train.py`` between the template and ``commit`` (empty if none)."""
        return self.repo.git.diff(self.root_commit, commit, "--", TRAIN_SCRIPT)

    def diff_text(self, commit: str | None, new_text: str | None) -> str:
        """Unified diff from the train.py at ``commit`` (the template's when None) to ``new_text``."""
        if new_text is None:
            return ""
        old = self.train_script_at(commit or self.root_commit)
        return "".join(difflib.unified_diff(old.splitlines(True), new_text.splitlines(True),
                                            "a/train.py", "b/train.py"))
