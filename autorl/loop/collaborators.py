"""What a session's controller is handed: its stores, where stages run, and its search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autorl.stages.executor import Executor
from autorl.stages.workspace import Workspace
from autorl.storage.session_files import SessionFiles
from autorl.storage.tracking import Tracker
from search.policy import BestFirstPolicy
from search.proposers import Proposer
from search.seed_noise import Noise


@dataclass
class Collaborators:
    tracker: Tracker
    workspace: Workspace
    files: SessionFiles  # what the session folder holds, kept in MLflow too
    executor: Executor  # LocalStages, or RayExecutor with --executor ray
    proposer: Proposer
    policy: BestFirstPolicy | None  # None when the proposer chooses parents itself (flat and greedy baselines)
    report: Callable[[], dict[str, Path]] | None = None  # writes the session report (autorl/views/session_report.py)
    noise: Noise = field(default_factory=Noise)  # the seed-to-seed spread verdicts count (search/seed_noise.py)
