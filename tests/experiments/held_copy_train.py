"""copy_train.py that holds its stage open after the first step until the test releases it.

A test that stops a session mid-stage creates a file named ``release`` beside a stage's
metrics when that stage may finish (conftest.releasing), so the stop lands mid-stage by
construction, however slow the machine, rather than by timing.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HOLD_LIMIT_S = 600  # a test that forgets to release fails here instead of hanging

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
metrics = Path(spec["metrics_path"])


def log_step(step: int) -> None:
    with open(metrics, "a") as handle:
        handle.write(json.dumps({"step": step, "reward": 0.5}) + "\n")


log_step(1)
deadline = time.monotonic() + HOLD_LIMIT_S
while not (metrics.parent / "release").exists():
    if time.monotonic() > deadline:
        sys.exit("held_copy_train: never released")
    time.sleep(0.05)
log_step(2)
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print("steps: 2")
