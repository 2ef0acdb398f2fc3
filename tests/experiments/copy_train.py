"""A fast, well-behaved experiment for controller tests: it trains nothing.

It copies the starting checkpoint, logs two metric steps and prints the footer, so a
stage costs a fraction of a second and the controller's bookkeeping can be checked.
"""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
with open(spec["metrics_path"], "a") as handle:
    for step in (1, 2):
        handle.write(json.dumps({"step": step, "reward": 0.5, "entropy": 0.3, "frac_reward_zero_std": 0.1}) + "\n")
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print("steps: 2")
