"""copy_train.py, but each of its three steps takes a second: time to stop a session mid-stage."""

import argparse
import json
import shutil
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
for step in (1, 2, 3):
    time.sleep(1.0)
    with open(spec["metrics_path"], "a") as handle:
        handle.write(json.dumps({"step": step, "reward": 0.5}) + "\n")
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print("steps: 3")
