"""Trains nothing and logs no per-step metrics, yet says it trained 20 steps: a trial
that breaks the template contract (its metrics contradict its footer)."""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print("steps: 20")
