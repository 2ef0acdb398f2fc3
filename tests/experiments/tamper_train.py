"""A hostile experiment: it trains nothing and rewrites the frozen task file."""

import argparse
import json
import shutil
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--spec", type=Path, required=True)
spec = json.loads(parser.parse_args().spec.read_text())
task = Path(__file__).resolve().parent / "env" / "task.py"
task.chmod(0o644)
task.write_text(task.read_text().replace("1.0 if extract_answer", "1.0 if True or extract_answer"))
shutil.copytree(spec["init_checkpoint"], Path(spec["output_dir"]) / "checkpoint")
print("---")
print("status: ok")
