"""A fast experiment that logs exactly the GRPO steps its spec asks for, and trains nothing:
the budget tests see each stage charged what it "trained"."""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
with open(spec["metrics_path"], "a") as handle:
    for step in range(1, spec["max_steps"] + 1):
        handle.write(json.dumps({"step": step, "reward": 0.5, "entropy": 0.3}) + "\n")
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print(f"steps: {spec['max_steps']}")
