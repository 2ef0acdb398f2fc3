"""The reward a generated template scores with: parsed from ``--reward`` and checked before
anything is written.

``exact``, ``last-number``, ``contains`` and ``regex:PATTERN`` are built into the
template's env/task.py; ``python:FILE:FUNCTION`` names a function ``(completion, answer)
-> float in [0, 1]`` whose file is copied into env/ as ``custom_reward.py`` and frozen
with the rest. A pattern that does not compile, a file or function that is not there,
and a function that raises or returns something other than a number in [0, 1] on the
data are each one line, before the template exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import DataFileError
from autorl.own_task import module_from_file

KINDS = ("exact", "last-number", "contains", "regex:PATTERN", "python:FILE:FUNCTION")
SKELETON_TASK = Path(__file__).resolve().parent / "skeleton" / "env" / "task.py"
TRIAL_ROWS = 20  # a custom function is called on this many rows' answers before the template is written


@dataclass(frozen=True)
class RewardSpec:
    kind: str  # exact | last-number | contains | regex | python
    pattern: str = ""
    file: Path | None = None
    function: str = ""

    def settings(self, tag: str | None) -> dict:
        """The ``[reward]`` table of env/task.toml."""
        table: dict = {"kind": self.kind}
        if self.kind == "regex":
            table["pattern"] = self.pattern
        if self.kind == "python":
            table["function"] = self.function
        if tag:
            table["tag"] = tag
        return table

    def describe(self) -> str:
        if self.kind == "regex":
            return f"regex {self.pattern!r} (its last match, first group if any, against the answer)"
        if self.kind == "python":
            return f"{self.function} from {self.file.name} (copied to env/custom_reward.py)"
        return {"exact": "exact match (case, spacing and surrounding punctuation ignored)",
                "last-number": "the reply's last number equals the answer's",
                "contains": "the reply contains the answer"}[self.kind]


def parse_reward(text: str) -> RewardSpec:
    """``--reward``'s value as a spec, or one line saying what is wrong with it.

    >>> parse_reward("regex:answer is (\\\\d+)").pattern
    'answer is (\\\\d+)'
    """
    if text in ("exact", "last-number", "contains"):
        return RewardSpec(text)
    if text.startswith("regex:"):
        pattern = text[len("regex:"):]
        try:
            re.compile(pattern)
        except re.error as error:
            raise DataFileError(f"--reward regex:{pattern}: the pattern does not compile: {error}") from None
        if not pattern:
            raise DataFileError("--reward regex: needs a pattern after 'regex:'")
        return RewardSpec("regex", pattern=pattern)
    if text.startswith("python:"):
        file, _, function = text[len("python:"):].rpartition(":")
        if not file or not function:
            raise DataFileError(f"--reward {text}: write python:FILE:FUNCTION")
        path = Path(file).expanduser()
        load_function(path, function)
        return RewardSpec("python", file=path, function=function)
    raise DataFileError(f"--reward {text}: choose one of {', '.join(KINDS)}")


def load_function(path: Path, function: str):
    """The user's reward function, loaded from its file the way env/task.py will."""
    if not path.is_file():
        raise DataFileError(f"--reward python:{path}:{function}: no such file {path}")
    try:
        module = module_from_file(path, "autorl_custom_reward")
    except Exception as error:  # noqa: BLE001 - the user's file: any failure is theirs, in one line
        raise DataFileError(f"--reward python:{path}:{function}: importing {path.name} raised "
                            f"{type(error).__name__}: {error}") from None
    found = getattr(module, function, None)
    if not callable(found):
        raise DataFileError(f"--reward python:{path}:{function}: {path.name} defines no function {function!r}")
    return found


def check_on_rows(spec: RewardSpec, items: list[dict]) -> None:
    """Call a custom reward on the data's own answers, through the check the generated
    env/task.py applies to every value: it must not raise and must give a number in [0, 1],
    here rather than in the middle of a stage."""
    if spec.kind != "python":
        return
    function, task = load_function(spec.file, spec.function), skeleton_task()
    for item in items[:TRIAL_ROWS]:
        for completion in (item["answer"], ""):
            try:
                task.as_reward(function(completion, item["answer"]), spec.function)
            except Exception as error:  # noqa: BLE001 - the user's function, or a value it gave
                where = f"on the answer {item['answer'][:40]!r}" if completion else "on an empty reply"
                raise DataFileError(f"--reward python:{spec.file}:{spec.function} raised {type(error).__name__}: "
                                    f"{error} {where}") from None


def skeleton_task():
    """The generated template's env/task.py (it reads its settings only when scoring)."""
    return module_from_file(SKELETON_TASK, "autorl_own_task_skeleton_task")
