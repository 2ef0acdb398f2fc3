"""Environment templates: what ``autorl init`` copies and a session starts from.

A template is a folder with a frozen ``env/`` (task, evaluator, constants, base model),
the mutable ``train.py``, the research brief ``program.md`` and the stage space
``space.toml``. Built-in templates ship inside the package; any folder with the same
files works through ``--template PATH``.
"""

from __future__ import annotations

import ast
import json
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import CheckpointError, TemplateError
from autorl.stages.evaluate import check_checkpoint
from search.errors import SpaceError
from search.space import SearchSpace

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
    package = Path(__file__).resolve().parents[1]  # autorl/
    packaged = package / "templates"
    return packaged if packaged.is_dir() else package.parent / "templates"


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

    def stage_steps(self, hyperparameters: dict) -> int:
        """GRPO steps of a stage: its value of the parameter with role "steps", else the
        template's fixed ``[stage] max_steps``."""
        name = self.space.named("steps")
        return int(hyperparameters[name]) if name else int(self.constants["stage"]["max_steps"])

    def stage_step_choices(self) -> list[int]:
        """Every stage length the space allows (the fixed one where constants set it)."""
        name = self.space.named("steps")
        if not name:
            return [int(self.constants["stage"]["max_steps"])]
        param = self.space.params[name]
        if param.type == "categorical":
            return sorted(int(c) for c in param.choices)
        return list(range(int(param.low), int(param.high) + 1))

    def fit_steps(self, hyperparameters: dict, steps_left: int | None) -> dict | None:
        """``hyperparameters`` with the stage shortened to fit ``steps_left`` GRPO steps (the
        longest stage the space allows within it); unchanged when it fits; None when no
        stage fits."""
        if steps_left is None or self.stage_steps(hyperparameters) <= steps_left:
            return hyperparameters
        name = self.space.named("steps")
        fitting = [s for s in self.stage_step_choices() if s <= steps_left]
        if not name or not fitting:
            return None
        return {**hyperparameters, name: type(hyperparameters[name])(fitting[-1])}

    @property
    def reward_width(self) -> float | None:
        """high - low of ``[reward]`` in env/constants.toml, when the template declares it."""
        reward = self.constants.get("reward")
        return float(reward["high"]) - float(reward["low"]) if reward else None

    @property
    def stage_sd(self) -> float:
        """The seed-to-seed spread of one stage's validation score (``[noise] stage_sd``,
        measured with benchmarks/stage_spread.py); 0 when the template has not measured it."""
        return float(self.constants.get("noise", {}).get("stage_sd", 0.0))

    @property
    def eval_token_cap(self) -> int | None:
        """``[eval] max_new_tokens``: the most tokens the evaluator generates, when the template says."""
        cap = self.constants.get("eval", {}).get("max_new_tokens")
        return int(cap) if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0 else None

    @property
    def stage_sd_source(self) -> str:
        return str(self.constants.get("noise", {}).get("source", ""))

    @property
    def stage_wall_seconds(self) -> float:
        return float(self.constants["stage"]["wall_seconds"])

    @property
    def stage_cpus(self) -> float | None:
        """``[stage] cpus``: the CPUs one trial of this template wants, when it says."""
        cpus = self.constants["stage"].get("cpus")
        return float(cpus) if cpus is not None else None


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


def load(name_or_path: str, require_model: bool = True) -> Template:
    """Load a template, checking every rule of the contract (docs/templates.md) that can be
    checked without running it; each broken rule is one line naming the file and the fix.
    ``require_model=False`` skips the base model (``init`` may be about to install one)."""
    path = resolve(name_or_path)
    check_files(path)
    constants = read_constants(path)
    if require_model:
        check_base_model(path, path / FROZEN_DIR / constants["model"]["base_model"])
    space = read_space(path)
    check_stage_length(path, space, constants)
    return Template(name=path.name, path=path, constants=constants, space=space,
                    program=(path / "program.md").read_text())


def check_stage_length(path: Path, space: SearchSpace, constants: dict) -> None:
    """A stage must know how many GRPO steps to train: no silent default."""
    fixed = constants["stage"].get("max_steps")
    if space.named("steps") is None and (isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1):
        raise _broken(path, "no stage length: give the parameter that sets GRPO steps `role = \"steps\"` in "
                            "space.toml (a parameter named max_steps has it), or set [stage] max_steps = N in "
                            "env/constants.toml")


def _broken(path: Path, what: str) -> TemplateError:
    return TemplateError(f"template {path}: {what}")


def check_files(path: Path) -> None:
    missing = [rel for rel in REQUIRED_FILES if not (path / rel).is_file()]
    if missing:
        raise _broken(path, f"missing {', '.join(missing)}; every template needs {', '.join(REQUIRED_FILES)}")
    for rel in ("train.py", "env/task.py", "env/evaluate.py", "env/prepare.py"):
        try:
            ast.parse((path / rel).read_text(), filename=rel)
        except SyntaxError as exc:
            raise _broken(path, f"{rel} line {exc.lineno}: {exc.msg}; fix the Python syntax") from exc
    if not (path / "program.md").read_text().strip():
        raise _broken(path, "program.md is empty; write the research brief the proposers read")


def read_constants(path: Path) -> dict:
    fix = "it needs [model] base_model = \"folder under env/\" and [stage] wall_seconds = a positive number"
    try:
        constants = tomllib.loads((path / "env/constants.toml").read_text())
        base_model, wall = constants["model"]["base_model"], constants["stage"]["wall_seconds"]
    except tomllib.TOMLDecodeError as exc:
        raise _broken(path, f"env/constants.toml is not valid TOML ({exc}); {fix}") from exc
    except (KeyError, TypeError) as exc:
        raise _broken(path, f"env/constants.toml lacks {exc}; {fix}") from exc
    if not isinstance(base_model, str) or not base_model.strip():
        raise _broken(path, f"env/constants.toml: base_model must be a folder name; {fix}")
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 < wall < float("inf"):
        raise _broken(path, f"env/constants.toml: wall_seconds = {wall!r} is not a positive number; {fix}")
    cpus = constants["stage"].get("cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or not 0 < cpus < 4096):
        raise _broken(path, f"env/constants.toml: [stage] cpus = {cpus!r} is not a positive number of CPUs "
                            "(one trial's share); or leave it out")
    reward = constants.get("reward")
    if reward is not None:
        low, high = (reward.get(k) if isinstance(reward, dict) else None for k in ("low", "high"))
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)) or not low < high:
            raise _broken(path, f"env/constants.toml: [reward] needs numbers low < high (the range of a completion's "
                                f"total reward), got low = {low!r}, high = {high!r}; or leave [reward] out")
    noise = constants.get("noise")
    sd = noise.get("stage_sd") if isinstance(noise, dict) else None
    if noise is not None and (isinstance(sd, bool) or not isinstance(sd, (int, float)) or not 0 <= sd < 1e6):
        raise _broken(path, f"env/constants.toml: [noise] stage_sd = {sd!r} is not a non-negative number (the "
                            "seed-to-seed spread of one stage's validation score); or leave [noise] out")
    return constants


def check_base_model(path: Path, base_model: Path) -> None:
    config = base_model / "config.json"
    if not config.is_file():
        raise _broken(path, f"base model {base_model} not found (no config.json); give the template one with "
                            "`autorl init DIR --template NAME --base-model HF_ID_OR_FOLDER` (or env/prepare.py)")
    try:
        data = json.loads(config.read_text())
    except ValueError as exc:
        raise _broken(path, f"{config} is not valid JSON ({exc}); rebuild the base model with env/prepare.py") from exc
    if not isinstance(data, dict) or "model_type" not in data:
        raise _broken(path, f"{config} has no model_type; save the base model with save_pretrained")
    try:  # the rules every checkpoint keeps: safetensors weights, no remote code, no pickles
        check_checkpoint(base_model)
    except CheckpointError as exc:
        raise _broken(path, f"{exc}; save the base model with save_pretrained(safe_serialization=True)") from exc


def read_space(path: Path) -> SearchSpace:
    try:
        space = SearchSpace.from_toml(path / "space.toml")
    except SpaceError as exc:
        detail = str(exc).split("invalid search space: ", 1)[-1]
        raise _broken(path, f"space.toml is not a valid search space: {detail}; see docs/templates.md") from exc
    if not space.params:
        raise _broken(path, "space.toml defines no hyperparameter; add at least one [name] table")
    return space


def copy_to(template: Template, dest: Path) -> None:
    """Copy a template's files into ``dest`` (which must not exist or be empty)."""
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TemplateError(f"{dest} exists and is not an empty folder; choose a new folder")
    shutil.copytree(template.path, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
