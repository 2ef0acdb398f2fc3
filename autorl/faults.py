"""Named points in the research loop where a test can kill the controller.

``AUTORL_FAULT=<point>`` makes the controller SIGKILL itself the first time it reaches
that point (``<point>:<n>``: the n-th time), exactly as an OOM kill or a reboot would;
``autorl resume`` (or, before a session's run exists, a new ``research`` with the same
name) must then recover. Points while a session is created: ``session_reserved``,
``workspace_made``, ``session_run_created``; then in the order a stage passes them:
``proposal_accepted``, ``node_committed`` (its train.py commit made, no run yet),
``run_created`` (any MLflow run, the session's first: created, its long tags and params
not yet written), ``node_recorded``, ``launched``, ``mid_training``, ``trained``,
``mid_evaluation`` (the base model's evaluation counts as the first), ``evaluated``.
Kills at random moments (not only these) are tested too (tests/test_resume_any.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

POINTS = ("session_reserved", "workspace_made", "session_run_created", "proposal_accepted", "node_committed",
          "run_created", "node_recorded", "launched", "mid_training", "trained", "mid_evaluation", "evaluated")
_reached: Counter = Counter()


def point(name: str) -> None:
    wanted = os.environ.get("AUTORL_FAULT")
    if not wanted:
        return
    target, _, nth = wanted.partition(":")
    if target != name:
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
