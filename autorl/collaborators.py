"""What a session's controller is handed: its stores, where stages run, and its search."""

from __future__ import annotations

from dataclasses import dataclass

from autorl.executor import Executor
from autorl.tracking import Tracker
from autorl.workspace import Workspace
from search.policy import BestFirstPolicy
from search.proposers import Proposer


@dataclass
class Collaborators:
    tracker: Tracker
    workspace: Workspace
    executor: Executor  # LocalStages, or RayExecutor with --executor ray
    proposer: Proposer
    policy: BestFirstPolicy | None  # None when the proposer chooses parents itself (flat and greedy baselines)
