"""Scoring checkpoints with the frozen evaluator — the only source of scores.

The controller, never the experiment, runs ``env/evaluate.py`` from the workspace
after checking that no frozen file changed and that the checkpoint holds only weights
and tokenizer files (safetensors, JSON): no pickles, no code to trust. The evaluator
runs in the session's sandbox too, with the checkpoint mounted read-only.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from autorl import faults
from autorl.errors import CheckpointError
from autorl.executor import scrubbed_env
from autorl.frozen import FrozenGuard
from autorl.sandbox import Mounts, Sandbox

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
        result = self.sandbox.run(argv, cwd=out_dir, wall_seconds=EVAL_WALL_SECONDS, env=scrubbed_env(out_dir),
                                  mounts=mounts, log_prefix=f"eval_{split}_", guard=self.guard,
                                  pristine=self.pristine_env, on_poll=lambda: faults.point("mid_evaluation"))
        if not result.ok or not out.is_file():
            raise CheckpointError(f"evaluation failed: {result.failure_reason(EVAL_WALL_SECONDS) or 'no result file'}")
        data = json.loads(out.read_text())
        return EvalResult(split, float(data["mean"]), float(data["stderr"]), int(data["n"]),
                          float(data.get("format_rate", float("nan"))), float(data.get("seconds", result.wall_seconds)), out)
