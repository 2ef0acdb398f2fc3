"""Environment templates: what ``autorl init`` copies and a session starts from.

A template is a folder with a frozen ``env/`` (task, evaluator, constants, base model),
the mutable ``train.py``, the research brief ``program.md`` and the stage space
``space.toml``. Built-in templates ship inside the package; any folder with the same
files works through ``--template PATH``.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import TemplateError
from autorl.space import SearchSpace

REQUIRED_FILES = (
    "train.py",
    "program.md",
    "space.toml",
    "env/task.py",
    "env/evaluate.py",
    "env/prepare.py",
    "env/constants.toml",
)
FROZEN_DIR = "env"


def builtin_root() -> Path:
    """Where the built-in templates live: inside the wheel, or the source checkout."""
    packaged = Path(__file__).resolve().parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "templates"


def builtin_names() -> list[str]:
    root = builtin_root()
    return sorted(p.name for p in root.iterdir() if (p / "train.py").exists()) if root.is_dir() else []


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    constants: dict
    space: SearchSpace
    program: str

    @property
    def env_dir(self) -> Path:
        return self.path / FROZEN_DIR

    def base_model_dir(self, root: Path | None = None) -> Path:
        """The base model, under ``root`` (a workspace copy) or the template itself."""
        return (root or self.path) / FROZEN_DIR / self.constants["model"]["base_model"]

    @property
    def stage_wall_seconds(self) -> float:
        return float(self.constants["stage"]["wall_seconds"])


def resolve(name_or_path: str) -> Path:
    """A built-in template's folder, or the folder at a path."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    builtin = builtin_root() / name_or_path
    if "/" not in name_or_path and builtin.is_dir():
        return builtin
    known = ", ".join(builtin_names()) or "none"
    raise TemplateError(f"unknown template {name_or_path!r}: not a built-in ({known}) and not a folder")


def load(name_or_path: str) -> Template:
    path = resolve(name_or_path)
    missing = [rel for rel in REQUIRED_FILES if not (path / rel).is_file()]
    if missing:
        raise TemplateError(f"template {path} is missing {', '.join(missing)}")
    try:
        constants = tomllib.loads((path / "env/constants.toml").read_text())
        base_model = path / FROZEN_DIR / constants["model"]["base_model"]
        float(constants["stage"]["wall_seconds"])
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise TemplateError(f"template {path}: env/constants.toml needs [model] base_model and [stage] wall_seconds ({exc})") from exc
    if not (base_model / "config.json").is_file():
        raise TemplateError(f"template {path}: base model {base_model} not found; build it with env/prepare.py")
    return Template(
        name=path.name,
        path=path,
        constants=constants,
        space=SearchSpace.from_toml(path / "space.toml"),
        program=(path / "program.md").read_text(),
    )


def copy_to(template: Template, dest: Path) -> None:
    """Copy a template's files into ``dest`` (which must not exist or be empty)."""
    if dest.exists() and any(dest.iterdir()):
        raise TemplateError(f"{dest} exists and is not empty")
    shutil.copytree(template.path, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
