"""A fast experiment that trains fewer GRPO steps than its spec plans (40-80% of them,
set by the stage's seed), as a stage ended early by a time limit or a crash would: the
budget must charge what it trained, and a session's stop may only count settled steps."""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
trained = max(1, spec["max_steps"] * (2 + spec["seed"] % 3) // 5)
with open(spec["metrics_path"], "a") as handle:
    for step in range(1, trained + 1):
        handle.write(json.dumps({"step": step, "reward": 0.5, "entropy": 0.3}) + "\n")
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
print(f"steps: {trained}")
