"""Trial start-up overhead of the sandbox: the same commands with and without bubblewrap,
interleaved so both see the same machine load.

    .venv/bin/python benchmarks/sandbox_overhead.py [--repeats 5]

Measures two commands per tier: an empty Python (the pure start-up cost of the tier:
namespaces, mounts, cgroup) and `import torch, transformers, trl` (what every stage
pays before it trains). Writes benchmarks/results/sandbox_overhead.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sandbox import BwrapSandbox, Limits, Mounts, Sandbox, bwrap_works, scrubbed_env

COMMANDS = {"empty python": "pass", "import torch, transformers, trl": "import torch, transformers, trl"}


def timed(sandbox: Sandbox, code: str, run_dir: Path) -> float:
    started = time.monotonic()
    result = sandbox.run([sys.executable, "-c", code], cwd=run_dir, wall_seconds=300, env=scrubbed_env(run_dir),
                         mounts=Mounts(writable=[run_dir]))
    if not result.ok:
        raise RuntimeError(result.stderr_path.read_text()[-2000:])
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sandbox_overhead.md")
    args = parser.parse_args()
    works, why = bwrap_works()
    if not works:
        print(f"bubblewrap unavailable: {why}")
        return 1
    tiers = {"none": Sandbox(Limits()), "bwrap": BwrapSandbox(Limits())}
    rows = ["| command | no sandbox (median s) | bubblewrap (median s) | overhead |", "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for label, code in COMMANDS.items():
            times = {tier: [] for tier in tiers}
            for _ in range(args.repeats):
                for tier, sandbox in tiers.items():  # interleaved: same load for both
                    times[tier].append(timed(sandbox, code, Path(tmp)))
            plain, boxed = statistics.median(times["none"]), statistics.median(times["bwrap"])
            rows.append(f"| {label} | {plain:.2f} | {boxed:.2f} | {boxed - plain:+.2f} s ({boxed / plain:.2f}×) |")
    text = "# Sandbox start-up overhead\n\n" + "\n".join(rows) + f"\n\n{args.repeats} runs each, interleaved.\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
