import os

import pytest

from autorl.errors import FrozenFileError
from autorl.stages import template as templates
from autorl.stages.frozen import FrozenGuard
from autorl.stages.workspace import Workspace


@pytest.fixture
def workspace(tmp_path):
    return Workspace.create(templates.load("arith"), tmp_path / "ws")


def test_workspace_is_a_git_repo_with_the_template(workspace):
    assert workspace.repo.head.commit.message.startswith("template arith")
    assert (workspace.path / "env" / "base_model" / "model.safetensors").is_file()
    assert not workspace.repo.is_dirty(untracked_files=True)


def test_train_script_commits_and_diff(workspace):
    original = workspace.head
    text = workspace.train_script.read_text().replace("per_device_train_batch_size=micro",
                                                      "per_device_train_batch_size=32")
    commit = workspace.commit_train_script(text, "smaller batch")
    assert commit != original and workspace.head == commit
    diff = workspace.diff_from_template(commit)
    assert "-        per_device_train_batch_size=micro" in diff and "+        per_device_train_batch_size=32" in diff
    assert workspace.diff_from_template(original) == ""
    assert "per_device_train_batch_size=micro" in workspace.train_script_at(original)


def test_train_py_read_back_from_any_commit_is_the_file_byte_for_byte(workspace):
    """An LLM's edit is applied to the parent's train.py as read back from git: a text that
    lost its final newline on the way made every edited train.py end without one."""
    template_text = workspace.train_script.read_text()
    assert template_text.endswith("\n") and workspace.train_script_at(workspace.root_commit) == template_text
    edited = template_text.replace("disable_tqdm=True,", "disable_tqdm=True,\n        warmup_steps=4,")
    commit = workspace.commit_train_script(edited, "warm up")
    assert workspace.train_script_at(commit) == edited
    assert "No newline at end of file" not in workspace.diff_from_template(commit)


@pytest.mark.parametrize("change", ["modify", "modify keeping size and mtime", "delete", "add"])
def test_guard_detects_every_kind_of_change(workspace, change):
    env = workspace.path / "env"
    guard = FrozenGuard.record(env)
    guard.check()
    target = env / "constants.toml"
    if change == "modify":
        target.chmod(0o644)
        target.write_text(target.read_text() + "\n# tampered\n")
    elif change.startswith("modify keeping"):  # unchanged files are not re-read: ctime still gives it away
        before = target.stat()
        target.chmod(0o644)
        target.write_text(target.read_text().replace("=", "~", 1))
        os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert target.stat().st_size == before.st_size and target.stat().st_mtime_ns == before.st_mtime_ns
    elif change == "delete":
        target.unlink()
    else:
        (env / "__pycache__").mkdir()
        (env / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"evil")
    with pytest.raises(FrozenFileError, match="evaluation refused"):
        guard.check()


def test_the_base_model_weights_stay_out_of_git(workspace):
    tracked = workspace.repo.git.ls_files().splitlines()
    assert "train.py" in tracked and "env/task.py" in tracked
    assert not [path for path in tracked if path.startswith("env/base_model/")]
