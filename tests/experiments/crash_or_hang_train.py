"""A misbehaving experiment: the first stage raises, the second hangs, later ones copy."""

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
if spec["node_id"] == "n001":
    raise RuntimeError("deliberate crash in train.py")
if spec["node_id"] == "n002":
    subprocess.Popen(["sleep", "600"])  # a child in the same group must die too
    time.sleep(600)
with open(spec["metrics_path"], "a") as handle:
    handle.write(json.dumps({"step": 1, "reward": 0.5}) + "\n")
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print("steps: 1")
