"""A fast experiment that records the environment it was given, then copies the checkpoint."""

import argparse
import json
import os
import shutil
from pathlib import Path

BATCH_SIZE = 64

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
output = Path(spec["output_dir"])
(output / "seen_env.json").write_text(json.dumps(dict(os.environ)))
with open(spec["metrics_path"], "a") as handle:
    handle.write(json.dumps({"step": 1, "reward": 0.5, "batch_size": BATCH_SIZE}) + "\n")
shutil.copytree(spec["init_checkpoint"], output / "checkpoint")
print("---")
print("status: ok")
