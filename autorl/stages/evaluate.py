"""Scoring checkpoints with the frozen evaluator — the only source of scores.

The controller, never the experiment, runs ``env/evaluate.py`` from the workspace
after checking that no frozen file changed and that the checkpoint holds only weights
and tokenizer files (safetensors, JSON): no pickles, no code to trust. The evaluator
runs in the session's sandbox too, with the checkpoint mounted read-only.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autorl import faults
from autorl.errors import CheckpointError, ContractError
from autorl.stages.frozen import FrozenGuard, run_guarded
from sandbox import Mounts, Sandbox, scrubbed_env

SAFE_SUFFIXES = {".safetensors", ".json", ".jinja", ".txt", ".model", ".md"}
EVAL_WALL_SECONDS = 600.0


@dataclass(frozen=True)
class EvalResult:
    split: str
    mean: float
    stderr: float
    n: int
    format_rate: float
    seconds: float
    path: Path
    engine: str = ""  # how the evaluator decoded (e.g. hf, vllm), when it says
    wall_seconds: float = 0.0  # launch to exit of the evaluator's process
    generation_seconds: float | None = None  # decoding alone, when the evaluator says
    worker: str = ""  # how its process started (warm, cold)
    extra: dict[str, float] = field(default_factory=dict)  # the evaluator's other numbers, by name

    def items(self) -> list[dict]:
        return json.loads(self.path.read_text())["items"]


def check_checkpoint(checkpoint: Path) -> None:
    """Refuse a checkpoint that could run code when loaded."""
    if not (checkpoint / "config.json").is_file():
        raise CheckpointError(f"no checkpoint at {checkpoint} (config.json missing)")
    if not any(checkpoint.glob("*.safetensors")):
        raise CheckpointError(f"checkpoint {checkpoint} has no .safetensors weights")
    for path in checkpoint.rglob("*"):
        if path.is_symlink():
            raise CheckpointError(f"checkpoint rejected: {path.name} is a symlink")
        if path.is_file() and path.suffix not in SAFE_SUFFIXES:
            raise CheckpointError(f"checkpoint rejected: {path.name} is not a weights or tokenizer file")
    config = json.loads((checkpoint / "config.json").read_text())
    if "auto_map" in config:
        raise CheckpointError("checkpoint rejected: config.json asks for remote code (auto_map)")


class FrozenEvaluator:
    """Runs the workspace's frozen ``env/evaluate.py`` on a checkpoint."""

    def __init__(self, workspace: Path, guard: FrozenGuard, sandbox: Sandbox, pristine_env: Path | None = None):
        self.workspace = workspace
        self.guard = guard
        self.sandbox = sandbox
        self.pristine_env = pristine_env

    def score(self, checkpoint: Path, split: str, out_dir: Path) -> EvalResult:
        """Score ``checkpoint`` on ``split``; raises FrozenFileError or CheckpointError."""
        self.guard.check()
        check_checkpoint(checkpoint)
        out_dir.mkdir(parents=True, exist_ok=True)
        out = out_dir / f"eval_{split}.json"
        argv = [sys.executable, str(self.workspace / "env" / "evaluate.py"),
                "--checkpoint", str(checkpoint), "--split", split, "--out", str(out)]
        mounts = Mounts(read_only=[self.workspace, checkpoint], writable=[out_dir])
        result = run_guarded(self.sandbox, self.guard, self.pristine_env, argv, refused="evaluation", cwd=out_dir,
                             wall_seconds=EVAL_WALL_SECONDS, env=scrubbed_env(out_dir), mounts=mounts,
                             log_prefix=f"eval_{split}_", on_poll=lambda: faults.point("mid_evaluation"))
        if not result.ok:
            raise CheckpointError(f"evaluation failed: {result.failure_reason(EVAL_WALL_SECONDS)}")
        if not out.is_file():
            raise ContractError(f"env/evaluate.py broke the template contract: it exited 0 but wrote no {out.name}; "
                                "it must write its result to --out (docs/templates.md)")
        data = read_eval_output(out)
        generation = data.get("generation_seconds")
        return EvalResult(split, data["mean"], data["stderr"], data["n"], data.get("format_rate", float("nan")),
                          data.get("seconds", result.wall_seconds), out, str(data.get("engine", "")),
                          result.wall_seconds, float(generation) if isinstance(generation, (int, float)) else None,
                          result.worker, extra_metrics(data))


CONTRACT_KEYS = {"mean", "stderr", "n", "items", "split", "seconds", "generation_seconds", "engine"}
MAX_EXTRA_METRICS = 20


def extra_metrics(data: dict) -> dict[str, float]:
    """The evaluator's numbers beyond the contract (a format rate, a per-category score…):
    recorded, shown and given to the proposers with the score. Names are kept short and
    safe for MLflow; non-finite values are dropped."""
    extra = {}
    for key, value in data.items():
        if key in CONTRACT_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value == value and abs(value) != float("inf") and re.fullmatch(r"[A-Za-z0-9_./-]{1,60}", key):
            extra[key] = float(value)
    return dict(sorted(extra.items())[:MAX_EXTRA_METRICS])


def read_eval_output(path: Path) -> dict:
    """The evaluator's JSON, checked against the template contract (docs/templates.md).

    A break of the contract is the template's bug, not the checkpoint's: it stops the
    session with a line naming the file and the fix, instead of a KeyError later.
    """
    def broken(what: str) -> ContractError:
        return ContractError(f"env/evaluate.py broke the template contract: {what} in {path.name}; "
                             "write mean, stderr, n and items with an id and correct each (docs/templates.md)")

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise broken(f"unreadable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise broken("not a JSON object")
    for key in ("mean", "stderr", "n"):
        if not isinstance(data.get(key), (int, float)) or isinstance(data.get(key), bool) or data[key] != data[key]:
            raise broken(f"no numeric {key!r}")
    items = data.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) and "id" in i and "correct" in i for i in items):
        raise broken("'items' is not a list of objects with 'id' and 'correct'")
    if len({str(i["id"]) for i in items}) != len(items):
        raise broken("item ids are not unique")
    return {**data, "mean": float(data["mean"]), "stderr": float(data["stderr"]), "n": int(data["n"])}
