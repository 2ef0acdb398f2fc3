"""Session configuration: what the user asked for, validated once, written to MLflow."""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from autorl.errors import ConfigError

Strategy = Literal["tree", "grid", "random", "optuna", "greedy", "pbt", "llm", "hybrid", "defaults"]
ApproveMode = Literal["none", "edits", "all"]  # which proposals wait for a person: none, train.py edits, every stage
WorkerKind = Literal["warm", "cold"]
SandboxKind = Literal["auto", "bwrap", "none"]
ExecutorKind = Literal["local", "ray"]
KeepCheckpoints = Literal["frontier", "all"]
MemoryMode = Literal["on", "off"]
NoiseProbeMode = Literal["auto", "off"]
STRATEGIES = get_args(Strategy)
APPROVE_MODES = get_args(ApproveMode)
DEFAULT_TEMPLATE = "digitsort"  # GRPO gains on it in a default session (benchmarks/results/first_run.md)
DEFAULT_TRAIN_STEPS = 160  # 8 stages of 20 steps: a few minutes on a 2-core CPU with the built-in templates
STEPS_PER_STAGE = 20  # a typical stage, to turn a step budget into a depth (the templates' default stage)
MIN_DEPTH = 3  # the shallowest default --max-depth (it grows from 16 stages on)
TREE_STRATEGIES = ("tree", "llm", "hybrid")  # a tree policy picks the parent; the others run their own line
LLM_STRATEGIES = ("llm", "hybrid")
# parts of the tree search that can be switched off, to measure what each buys (benchmarks/search_ablation.py)
SEARCH_PARTS = {
    "memory": "the memory of collapses (no stage anywhere near a learning rate that collapsed)",
    "steering-step": "steering moves one step (a quarter of the range); off: anywhere up to the bound",
    "budget": "the budget-aware policy (broad early, deep late; no fresh root at the end)",
    "steering": "diagnosis steering of the next stage",
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90s``, ``15m``, ``2h``, ``1h30m`` or ``300``.

    >>> parse_duration("1h30m")
    5400.0
    """
    cleaned = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        seconds = float(cleaned)
    else:
        parts = _DURATION_PART.findall(cleaned)
        if not parts or "".join(n + u for n, u in parts) != cleaned:
            raise ConfigError(f"bad duration {text!r}: use a number of seconds or e.g. 90s, 15m, 2h, 1h30m")
        seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError(f"bad duration {text!r}: it must be positive")
    return seconds


def default_runs_dir() -> Path:
    return Path(os.environ.get("AUTORL_RUNS_DIR", "runs"))


def prepare_runs_dir(path: Path) -> Path:
    """Create the runs directory if needed and prove it is writable."""
    path = path.expanduser().resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):  # one per process: no race
            pass
    except OSError as exc:
        raise ConfigError(f"runs directory {path} is not writable ({exc.strerror or exc}); "
                          "pick another with --runs-dir") from exc
    return path


class SessionConfig(BaseModel):
    """Everything that defines a research session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Session name, unique in the tracking store.")
    topic: str = Field(description="The research question, appended to the template's brief.")
    template: str = Field(DEFAULT_TEMPLATE, description="Built-in template name or a template folder.")
    train_steps: int | None = Field(None, ge=1, description="GRPO training steps the session may spend across all "
                                    f"stages: its compute budget [default: {DEFAULT_TRAIN_STEPS} when neither "
                                    "--stages nor --time is given].")
    stages: int | None = Field(None, ge=1, description="At most this many training stages.")
    time_budget_s: float | None = Field(None, description="Wall-clock budget of the whole session.")
    strategy: Strategy = Field("tree", description="How the next stage is proposed.")
    seed: int = Field(0, ge=0, lt=2**32, description="Seed of the search (policy, sampler, trial seeds).")
    target: float | None = Field(None, description="Stop when a node's validation score reaches this "
                                 "(e.g. 0.65); a topic stating a percentage suggests one.")
    patience: int | None = Field(None, ge=1, description="Stop after this many stages in a row without a gain "
                                 "beyond noise.")
    max_depth: int | None = Field(None, ge=1, description="Longest schedule: stages on one root-to-leaf path; "
                                  "a path still improving may grow to twice it [default: a quarter of --stages, at "
                                  "least 3].")
    leaf_width: int | None = Field(None, ge=1, description="Children a node one stage above the depth limit may "
                                   "take before the tree grows another lineage [default: no limit].")
    local_steps: bool = Field(False, description="A child stage samples each float parameter within one step (a "
                              "quarter of its range) of its parent's value, not the whole space.")
    schedule_prior: bool = Field(False, description="Capacity (completion length, group size, steps) only grows "
                                 "from a stage to its child; regularisation (lr, KL, temperature) moves freely.")
    ablate: tuple[str, ...] = Field((), description="Switch off a part of the tree search to measure it: "
                                    + ", ".join(SEARCH_PARTS) + ".")
    sandbox: SandboxKind = Field("auto", description="Trial isolation: auto (strongest that works), bwrap, or none.")
    trial_memory_gb: float = Field(8.0, ge=0.25, description="Memory limit of one trial (its cgroup), in GiB.")
    approve: ApproveMode = Field("none", description="Which proposals wait for you in the TUI: none, edits (those that "
                         "change train.py) or all (stored with the session; resume keeps it unless told otherwise).")
    workers: WorkerKind = Field("warm", description="How trials start: warm (forked from a worker that imported the "
                         "training stack once; falls back to cold where it cannot) or cold (a fresh interpreter each).")
    parallel: int = Field(1, ge=1, le=64, description="Stages that may train at once (one trial per GPU when the "
                          "session has GPUs; tree, greedy, pbt, llm and hybrid use them, the flat schedules run one "
                          "stage at a time).")
    executor: ExecutorKind = Field("local", description="Where stages run: local (sandboxed processes here) or ray "
                                   "(one Ray job per stage on a cluster; the session folder must be on storage "
                                   "every node reaches).")
    ray_address: str | None = Field(None, description="The Ray cluster's dashboard URL, e.g. http://head:8265 "
                                    "[default: the Ray head on this machine, started if none answers].")
    trial_cpus: float | None = Field(None, gt=0, description="CPUs of one trial (its cgroup quota and its threads) "
                                     "[default: all with --parallel 1, else the machine's CPUs shared out].")
    gpus: str = Field("auto", description="GPUs trials may use: auto (all nvidia-smi lists), none, or indexes like "
                                           "0,1; each running trial gets one.")
    runs_dir: Path
    tracking_uri: str
    study_storage: str | None = Field(None, description="Optuna storage URL (e.g. postgresql://…, from `autorl server "
                                      "up`) [default: a journal file in the session's folder, kept in MLflow too].")
    keep_checkpoints: KeepCheckpoints = Field(
        "frontier", description="Which stage checkpoints stay in the artifact store: frontier (the best, and every "
                                "node a later stage may still start from) or all.")
    memory: MemoryMode = Field(
        "on", description="Read what earlier sessions in this store measured on the same template (same frozen files "
                          "and space.toml), from any strategy: a section of the LLM's prompt, and TPE's warm start.")
    noise_probe: NoiseProbeMode = Field(
        "auto", description="Where the template declares no seed-to-seed spread and memory brought no estimate: "
                            "train the first stage from the base model once more with another seed, to measure "
                            "it (auto: with tree, llm and hybrid; off: never). Verdicts after it count it.")
    register_as: str | None = Field(None, description="Register the winner's model under this name in MLflow's model "
                                 "registry (it is logged as an MLflow model either way).")
    llm_model: str | None = Field(None, description="Model name at the OpenAI-compatible endpoint.")
    llm_base_url: str | None = Field(None, description="Endpoint URL [default: OPENAI_BASE_URL or OpenAI].")
    llm_timeout_s: float = Field(60.0, gt=0, le=3600, description="Timeout of one LLM request attempt.")
    llm_retries: int = Field(3, ge=0, le=20, description="Retries of a failed LLM request (429, 5xx, timeouts).")
    max_llm_tokens: int | None = Field(None, ge=1, description="Stop asking the LLM after this many tokens.")
    llm_prompt_tokens: int = Field(6000, ge=2000, le=200_000, description="Bound of one proposal prompt, in tokens "
                                   "(about 4 characters each): a larger one shows more nodes' curves; keep it and "
                                   "2,000 for the reply inside the model's context [default: 6000, for 8k-context "
                                   "local models].")
    max_llm_cost: float | None = Field(None, gt=0, description="Stop asking the LLM after this many dollars.")
    llm_reasoning_effort: Literal["low", "medium", "high"] | None = Field(
        None, description="Reasoning effort of a reasoning model (low, medium or high) [default: not sent, the "
                          "model's own].")
    llm_fallback: Literal["none", "optuna"] = Field(
        "none", description="When the LLM endpoint cannot serve the session at its start (no key, not a URL, nothing "
                            "answers, the key refused, the model unknown): none stops with one line saying what to "
                            "fix, before anything is created; optuna warns and proposes with Optuna while it fails.")

    @field_validator("topic")
    @classmethod
    def _topic_says_something(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the topic is empty; say what the session should find out, e.g. 'reach 70% on the task'")
        return value.strip()

    @field_validator("target")
    @classmethod
    def _finite_target(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite score, e.g. 0.65")
        return value

    @field_validator("time_budget_s")
    @classmethod
    def _positive_time(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < float("inf"):
            raise ValueError("must be a positive duration")
        return value

    @field_validator("ablate")
    @classmethod
    def _known_parts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [part for part in value if part not in SEARCH_PARTS]
        if unknown:
            raise ValueError(f"unknown part {unknown[0]!r}; choose from {', '.join(SEARCH_PARTS)}")
        return tuple(sorted(set(value)))

    @field_validator("study_storage")
    @classmethod
    def _database_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(postgresql|mysql|sqlite)(\+\w+)?://", value):
            raise ValueError("must be a database URL such as postgresql://user@host:port/db")
        if value is not None and re.match(r"^\w+(\+\w+)?://[^/@]*:[^/@]*@", value):
            raise ValueError("holds a password, which would be stored with the session for everyone who reads the "
                             "store; give it in ~/.pgpass or PGPASSWORD instead")
        return value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
            raise ValueError(f"bad session name {value!r}: use letters, digits, '.', '_' or '-' (max 64)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _depth_follows_the_budget(cls, data: Any) -> Any:
        """Deeper schedules when the budget pays for them: at 24 stages on arith, schedules
        up to 6 stages deep beat 3 by about 4 points for the tree, grid and greedy alike
        (benchmarks/results/search_efficiency-arith-24*.md)."""
        if isinstance(data, dict) and data.get("max_depth") is None:
            stages = stage_equivalent(data)
            data = {**data, "max_depth": max(MIN_DEPTH, stages // 4) if isinstance(stages, int) else MIN_DEPTH}
        return data

    @model_validator(mode="before")
    @classmethod
    def _a_budget_by_default(cls, data: Any) -> Any:
        """A session given no budget at all trains ``DEFAULT_TRAIN_STEPS`` GRPO steps."""
        if isinstance(data, dict) and all(data.get(k) is None for k in ("train_steps", "stages", "time_budget_s")):
            data = {**data, "train_steps": DEFAULT_TRAIN_STEPS}
        return data

    @model_validator(mode="after")
    def _llm_strategy_needs_a_model(self) -> "SessionConfig":
        if self.strategy in LLM_STRATEGIES and not self.llm_model:
            raise ValueError(f"--strategy {self.strategy} needs an LLM: pass --llm MODEL (and --llm-base-url URL)")
        return self

    @model_validator(mode="after")
    def _ray_address_needs_ray(self) -> "SessionConfig":
        if self.ray_address and self.executor != "ray":
            raise ValueError("--ray-address needs --executor ray")
        return self

    @property
    def session_dir(self) -> Path:
        return self.runs_dir / "sessions" / self.name


def stage_equivalent(data: dict) -> Any:
    """The stages a budget pays for: ``--stages``, else the step budget in typical stages."""
    stages, steps = data.get("stages"), data.get("train_steps")
    if stages is None and steps is None and data.get("time_budget_s") is None:
        steps = DEFAULT_TRAIN_STEPS
    if stages is None and isinstance(steps, int):
        return steps // STEPS_PER_STAGE
    return stages if stages is not None else 8


FLAGS = {  # config field -> the CLI option that sets it, so an error names what the user typed
    "train_steps": "--train-steps", "stages": "--stages", "time_budget_s": "--time", "strategy": "--strategy",
    "seed": "--seed", "max_depth": "--max-depth", "sandbox": "--sandbox", "trial_memory_gb": "--trial-memory",
    "workers": "--workers", "gpus": "--gpus", "name": "--name", "runs_dir": "--runs-dir",
    "tracking_uri": "--tracking-uri", "llm_model": "--llm",
    "llm_base_url": "--llm-base-url", "llm_timeout_s": "--llm-timeout", "max_llm_tokens": "--max-llm-tokens",
    "llm_prompt_tokens": "--llm-prompt-tokens",
    "max_llm_cost": "--max-llm-cost", "llm_reasoning_effort": "--llm-reasoning-effort", "topic": "TOPIC",
    "llm_fallback": "--llm-fallback",
    "target": "--target", "patience": "--patience", "template": "--template", "approve": "--approve",
    "schedule_prior": "--schedule-prior", "local_steps": "--local-steps", "leaf_width": "--leaf-width",
    "parallel": "--parallel", "trial_cpus": "--trial-cpus",
    "executor": "--executor", "ray_address": "--ray-address", "ablate": "--ablate", "study_storage": "--study-storage",
    "keep_checkpoints": "--keep-checkpoints", "register_as": "--register", "memory": "--memory",
    "noise_probe": "--noise-probe",
}


def choices(field: str) -> tuple[str, ...]:
    """The values a ``Literal``-typed option accepts (also inside ``Literal[...] | None``)."""
    annotation = SessionConfig.model_fields[field].annotation
    literal = next((a for a in (annotation, *get_args(annotation)) if get_origin(a) is Literal), None)
    return get_args(literal) if literal is not None else ()


def describe_error(error: dict) -> str:
    """One pydantic error as ``--option: what is wrong (got VALUE)``."""
    field = str(error["loc"][0]) if error["loc"] else ""
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Input ")
    flag = FLAGS.get(field, field)
    if error["type"] == "literal_error":
        known = ", ".join(choices(field))
        return f"{flag}: unknown {flag.removeprefix('--')} {error['input']!r}; choose one of {known}"
    got = (f" (got {error['input']!r})"
           if error["type"] != "value_error" and not isinstance(error.get("input"), dict) else "")
    return f"{flag}: {message}{got}" if flag and not message.startswith(flag) else message


def make_config(**values) -> SessionConfig:
    """Build a SessionConfig, turning validation errors into one readable ConfigError."""
    from pydantic import ValidationError

    try:
        return SessionConfig(**values)
    except ValidationError as exc:
        raise ConfigError("; ".join(describe_error(e) for e in exc.errors(include_url=False))) from exc
