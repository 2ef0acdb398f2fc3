"""The stage hyperparameter space (``space.toml``): bounds, log scales, choices.

Every proposer draws inside it and every proposal is checked against it, so a value
outside the space never reaches a trial.
"""

from __future__ import annotations

import itertools
import math
import random
import tomllib
from pathlib import Path
from typing import Any, Literal

import optuna
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from search.errors import ProposalError, SpaceError

# What a parameter does in GRPO, whatever the template calls it: steering, displays and
# the stage length read roles, never names. Role -> the short label displays use.
ROLES = {"learning_rate": "lr", "kl_coefficient": "β", "temperature": "T", "group_size": "G",
         "completion_length": "len", "steps": "steps"}
# A parameter named as TRL's GRPOConfig names it has that role unless space.toml says otherwise.
TRL_ROLES = {"learning_rate": "learning_rate", "beta": "kl_coefficient", "temperature": "temperature",
             "num_generations": "group_size", "max_completion_length": "completion_length", "max_steps": "steps"}


class Param(BaseModel):
    """One dimension of the space."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None
    default: Any
    grid: list[Any] | None = None
    help: str = ""
    role: str | None = None  # one of ROLES; "" in space.toml means none

    @model_validator(mode="before")
    @classmethod
    def _role_from_trl_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "role" not in data:
            return {**data, "role": TRL_ROLES.get(data.get("name"))}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Param":
        if self.role == "":
            object.__setattr__(self, "role", None)
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"{self.name}: unknown role {self.role!r}; choose one of {', '.join(ROLES)}")
        if self.type == "categorical":
            if not self.choices:
                raise ValueError(f"{self.name}: a categorical needs a non-empty 'choices' list")
            if self.default not in self.choices:
                raise ValueError(f"{self.name}: default {self.default!r} is not one of {self.choices}")
        else:
            if self.low is None or self.high is None or not self.low < self.high:
                raise ValueError(f"{self.name}: needs numeric low < high")
            if self.log and self.low <= 0:
                raise ValueError(f"{self.name}: a log scale needs low > 0")
            if not self.low <= self.default <= self.high:
                raise ValueError(f"{self.name}: default {self.default} is outside [{self.low}, {self.high}]")
        for value in self.grid or []:
            self.check(value)
        return self

    def check(self, value: Any) -> Any:
        """Return ``value`` in this parameter's type, or raise ProposalError saying why not."""
        if self.type == "categorical":
            if value not in self.choices:
                raise ProposalError(f"{self.name}={value!r} is not one of {self.choices}")
            return self.choices[self.choices.index(value)]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProposalError(f"{self.name}={value!r} is not a finite number")
        if self.type == "int":
            if int(value) != value:
                raise ProposalError(f"{self.name}={value!r} must be an integer")
            value = int(value)
        if not self.low <= value <= self.high:
            raise ProposalError(f"{self.name}={value!r} is outside [{self.low:g}, {self.high:g}]")
        return float(value) if self.type == "float" else value

    def distribution(self, low: float | None = None,
                     high: float | None = None) -> optuna.distributions.BaseDistribution:
        """Optuna's distribution for this parameter, optionally narrowed to [low, high]."""
        if self.type == "categorical":
            return optuna.distributions.CategoricalDistribution(self.choices)
        low = self.low if low is None else low
        high = self.high if high is None else high
        if self.type == "int":
            return optuna.distributions.IntDistribution(int(low), int(high), log=self.log)
        return optuna.distributions.FloatDistribution(low, high, log=self.log)

    def sample(self, rng: random.Random) -> Any:
        if self.type == "categorical":
            return rng.choice(self.choices)
        if self.type == "int":
            return rng.randint(int(self.low), int(self.high))
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


def field_error(error: dict) -> str:
    """A pydantic error as ``field: message`` (just the message for a whole-table check)."""
    field = ".".join(map(str, error["loc"]))
    message = error["msg"].removeprefix("Value error, ")
    return f"{field}: {message}" if field else message


def param_from_table(path: Path, name: str, fields: Any) -> Param:
    """One ``[name]`` table of space.toml as a Param; errors name the parameter and the field."""
    if not isinstance(fields, dict):
        raise SpaceError(f"{path}: invalid search space: [{name}] must be a table of type, low, high, default, …")
    try:
        return Param(name=name, **fields)
    except ValidationError as exc:
        details = "; ".join(field_error(e) for e in exc.errors(include_url=False))
        raise SpaceError(f"{path}: invalid search space: [{name}] {details}") from exc
    except TypeError as exc:  # e.g. a string default compared with numeric bounds
        raise SpaceError(f"{path}: invalid search space: [{name}] low, high and default must be numbers "
                         f"({exc})") from exc


class SearchSpace:
    """An ordered set of Params loaded from ``space.toml``."""

    def __init__(self, params: list[Param]):
        self.params = {param.name: param for param in params}
        self.roles: dict[str, str] = {}  # role -> parameter name
        for param in params:
            if param.role in self.roles:
                raise SpaceError(f"invalid search space: {self.roles[param.role]} and {param.name} both have "
                                 f"role {param.role!r}; give it to one of them")
            if param.role:
                self.roles[param.role] = param.name

    def named(self, role: str) -> str | None:
        """The parameter that plays ``role`` in this space, if one does."""
        return self.roles.get(role)

    @classmethod
    def from_toml(cls, path: Path) -> "SearchSpace":
        try:
            raw = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SpaceError(f"{path}: invalid search space: {exc}") from exc
        return cls([param_from_table(path, name, fields) for name, fields in raw.items()])

    def defaults(self) -> dict[str, Any]:
        return {name: param.default for name, param in self.params.items()}

    def check(self, values: dict[str, Any]) -> dict[str, Any]:
        """Validate a complete assignment; unknown or missing names are errors."""
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise ProposalError(f"unknown hyperparameters {unknown}; the space has {sorted(self.params)}")
        missing = sorted(set(self.params) - set(values))
        if missing:
            raise ProposalError(f"missing hyperparameters {missing}")
        return {name: self.params[name].check(values[name]) for name in self.params}

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {name: param.distribution() for name, param in self.params.items()}

    def sample(self, rng: random.Random) -> dict[str, Any]:
        return {name: param.sample(rng) for name, param in self.params.items()}

    def grid_points(self) -> list[dict[str, Any]]:
        """Every combination of the parameters' ``grid`` values, the others at their defaults."""
        axes = [[(name, v) for v in param.grid] if param.grid else [(name, param.default)]
                for name, param in self.params.items()]
        return [dict(point) for point in itertools.product(*axes)]

    def refined_grid_points(self, level: int) -> list[dict[str, Any]]:
        """Points of the ``level``-th refinement of the grid: every numeric axis takes only the
        midpoints (geometric where log) added at that level, the categorical axes keep their
        grid values. Empty when no numeric axis has a grid; rounding may repeat earlier points,
        which the caller drops."""
        if level == 0:
            return self.grid_points()
        numeric = {name: sorted(p.grid) for name, p in self.params.items() if p.grid and p.type != "categorical"}
        if not numeric:
            return []
        axes_values = {}
        for name, values in numeric.items():
            param = self.params[name]
            for _ in range(level):
                middles = [math.sqrt(a * b) if param.log else (a + b) / 2 for a, b in zip(values, values[1:])]
                values, new = sorted(values + middles), middles
            axes_values[name] = [round(v) if param.type == "int" else float(f"{v:.3g}") for v in new]
        axes = [[(name, v) for v in axes_values[name]] if name in axes_values else
                [(name, v) for v in param.grid] if param.grid else [(name, param.default)]
                for name, param in self.params.items()]
        return [dict(point) for point in itertools.product(*axes)]

    def mutate(self, values: dict[str, Any], rng: random.Random, changes: int = 1) -> dict[str, Any]:
        """``values`` with ``changes`` parameters moved: a numeric one by a random step of up to
        a quarter of its range (log range where log), a categorical one to another choice."""
        mutated = dict(values)
        for name in rng.sample(sorted(self.params), k=min(changes, len(self.params))):
            param = self.params[name]
            if param.type == "categorical":
                mutated[name] = rng.choice([c for c in param.choices if c != values[name]] or param.choices)
                continue
            if param.log:
                span = math.log(param.high) - math.log(param.low)
                value = math.exp(math.log(values[name]) + rng.uniform(-0.25, 0.25) * span)
            else:
                value = values[name] + rng.uniform(-0.25, 0.25) * (param.high - param.low)
            value = min(max(value, param.low), param.high)
            mutated[name] = round(value) if param.type == "int" else value
        return self.check(mutated)

    def describe(self) -> list[dict]:
        return [param.model_dump(exclude_none=True) for param in self.params.values()]
