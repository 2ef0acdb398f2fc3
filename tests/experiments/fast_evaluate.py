"""A stand-in for env/evaluate.py in controller tests: no torch, milliseconds per call.

The score of a checkpoint is drawn from a seed made of the checkpoint's last two path
parts (``nodes/n003/checkpoint`` -> ``n003/checkpoint``) and the split, so every node
gets its own, reproducible score, also across sessions with the same node ids.
"""

import argparse
import hashlib
import json
import math
import random
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", type=Path, required=True)
parser.add_argument("--split", required=True)
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()
key = "/".join(args.checkpoint.resolve().parts[-2:]) + ":" + args.split
rng = random.Random(hashlib.sha256(key.encode()).hexdigest())
level = 0.4 + 0.3 * rng.random()
items = [{"id": str(i), "correct": int(rng.random() < level), "formatted": 1} for i in range(400)]
mean = sum(item["correct"] for item in items) / len(items)
stderr = math.sqrt(mean * (1 - mean) / len(items))
args.out.write_text(json.dumps({"split": args.split, "n": len(items), "mean": mean, "stderr": stderr,
                                "format_rate": 1.0, "seconds": 0.0, "items": items}))
print(f"{args.split}: {mean:.4f} ± {stderr:.4f} (n={len(items)})")
