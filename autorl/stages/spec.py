"""The trial spec: the one input ``train.py`` gets (``--spec spec.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class TrialSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node_id: str
    init_checkpoint: str
    output_dir: str
    metrics_path: str
    hyperparameters: dict[str, Any]
    max_steps: int
    seed: int
    wall_seconds: float

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.model_dump(), indent=2))
        return path
