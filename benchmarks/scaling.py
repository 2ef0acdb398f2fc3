"""Stages side by side: throughput with 1 and 2 workers, locally and on Ray, and whether
parallel search is any worse, measured in one run on this machine.

Throughput: the default session (arith template, real TRL GRPO, tree search, seed 0) with
every stage made the same cost (20 GRPO steps, 8 completions per prompt, 12 tokens), one
thread per trial (``--trial-cpus 1``), run four ways: ``--parallel 1`` and ``2``, with
the local executor and as Ray jobs on a local Ray head. From `autorl show --json`:

  - stages/hour over the stage window (first stage start to last stage end);
  - per-stage overhead: a stage's wall time (start to scored) minus its productive time
    (GRPO steps and evaluation generation), so Ray's cost per stage shows against local;
  - the speed-up of 2 workers over 1 (target >= 1.8x on 2 cores).

Quality at equal stage budget: the tree search, 8 stages, seeds 100-104, sequential vs
``--parallel 2`` (max_steps fixed at 20), winners scored once on test, paired by seed.

    .venv/bin/python benchmarks/scaling.py [--stages 8] [--seeds 100,101,102,103,104]

Writes benchmarks/results/scaling.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from search_efficiency import paired_test, summarise  # noqa: E402

from autorl.stages import template as templates  # noqa: E402
from autorl.stages.ray_stages import LOCAL_ADDRESS, RAY_ENV, answers, start_local_head, stop_local_head  # noqa: E402
from autorl.stages.timing import productive_seconds  # noqa: E402

AUTORL = [sys.executable, "-m", "autorl"]
SAME_COST = {"max_steps": 20, "num_generations": 8, "max_completion_length": 12}
WAYS = [("local", 1), ("local", 2), ("ray", 1), ("ray", 2)]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--seeds", default="100,101,102,103,104")
    parser.add_argument("--work", type=Path, default=Path("/tmp/autorl-scaling"))
    parser.add_argument("--ways", default=",".join(f"{e}-p{n}" for e, n in WAYS),
                        help="which throughput runs (default: all four); others are kept from the last results")
    parser.add_argument("--skip-quality", action="store_true", help="keep the quality runs of the last results")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--report-only", action="store_true", help="rewrite scaling.md from scaling.json")
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    return args


def fixed_template(dest: Path, fixed: dict[str, int]) -> Path:
    """A copy of the arith template whose categorical ``fixed`` parameters have one value."""
    if dest.exists():
        shutil.rmtree(dest)
    templates.copy_to(templates.load("arith"), dest)
    space = dest / "space.toml"
    text = space.read_text()
    for name, value in fixed.items():
        text = re.sub(rf"(\[{name}\]\ntype = \"categorical\"\nchoices = )\[[^\]]*\]\ndefault = \d+",
                      rf"\g<1>[{value}]\ndefault = {value}", text)
        text = re.sub(rf"(\[{name}\](?:\n(?!\[).*)*?)\ngrid = \[[^\]]*\]", r"\1", text)
    space.write_text(text)
    return dest


def session(name: str, template: Path, args: argparse.Namespace, *extra: str) -> dict:
    runs = args.work / name
    shutil.rmtree(runs, ignore_errors=True)
    env = {**os.environ, **RAY_ENV, "AUTORL_RUNS_DIR": str(runs), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    done = subprocess.run([*AUTORL, "research", "scaling", "--template", str(template), "--stages", str(args.stages),
                           "--name", name, "--trial-cpus", "1", *extra], capture_output=True, text=True, env=env,
                          cwd=REPO)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    shown = subprocess.run([*AUTORL, "show", name, "--json"], capture_output=True, text=True, env=env, cwd=REPO,
                           check=True)
    return {"wall_seconds": wall, "data": json.loads(shown.stdout)}


def throughput(run: dict) -> dict:
    nodes = run["data"]["nodes"]
    starts = [datetime.fromisoformat(n["started_at"]) for n in nodes]
    ends = [datetime.fromisoformat(n["ended_at"]) for n in nodes]
    window = (max(ends) - min(starts)).total_seconds()
    walls = [(e - s).total_seconds() for s, e in zip(starts, ends)]
    overheads = [w - productive_seconds(n["timing"]) for w, n in zip(walls, nodes)]
    return {"stages": len(nodes), "window_s": round(window, 1), "stages_per_hour": round(len(nodes) / window * 3600, 1),
            "stage_wall_s": round(statistics.median(walls), 2),
            "stage_overhead_s": round(statistics.median(overheads), 2),
            "session_wall_s": round(run["wall_seconds"], 1), "overhead_share": run["data"]["overhead_share"],
            "failed": sum(n["status"] == "failed" for n in nodes)}


def measure_throughput(args: argparse.Namespace) -> dict:
    template = fixed_template(args.work / "same-cost", SAME_COST)
    started_head = not answers(LOCAL_ADDRESS)
    start_local_head(cpus=os.cpu_count())
    try:
        rows = {}
        for executor, parallel in WAYS:
            key = f"{executor}-p{parallel}"
            if key not in args.ways.split(","):
                continue
            rows[key] = throughput(session(f"tp-{key}", template, args, "--executor", executor,
                                           "--parallel", str(parallel)))
            print(key, rows[key], flush=True)
    finally:
        if started_head:
            stop_local_head()
    return rows


def measure_quality(args: argparse.Namespace) -> list[dict]:
    template = fixed_template(args.work / "steps-20", {"max_steps": 20})
    results = []
    for seed in args.seeds:
        for parallel in (1, 2):
            label = f"tree-p{parallel}"
            run = session(f"q-{label}-{seed}", template, args, "--seed", str(seed), "--parallel", str(parallel))
            results.append({"strategy": label, "seed": seed, "wall_seconds": run["wall_seconds"],
                            **summarise(run["data"])})
            print(label, seed, results[-1]["best_test"], round(run["wall_seconds"]), flush=True)
    return results


def report(rows: dict, quality: list[dict], args: argparse.Namespace) -> str:
    lines = ["# Stages side by side: throughput and search quality", "",
             f"Measured on this machine ({os.cpu_count()} CPUs), `benchmarks/scaling.py`. Arith template, real TRL "
             f"GRPO, tree search, {args.stages} stages, one thread per trial (`--trial-cpus 1`). Every session ran "
             "alone on the machine; rows may come from separate runs (`--ways`: the Ray rows were measured again "
             "after the stage's two runs in a Ray job began to share one warm worker).", "",
             "## Throughput (every stage the same cost: 20 steps, G=8, 12 tokens; seed 0)", "",
             "| executor, workers | stages/hour | speed-up vs 1 | median stage wall s | median overhead/stage s "
             "| session wall s | overhead share |", "|---|---|---|---|---|---|---|"]
    for key, row in rows.items():
        one = rows.get(key.replace("p2", "p1"))
        speedup = f"{row['stages_per_hour'] / one['stages_per_hour']:.2f}x" if one else "—"
        lines.append(f"| {key} | {row['stages_per_hour']:.0f} | {speedup} | {row['stage_wall_s']:.1f} | "
                     f"{row['stage_overhead_s']:.1f} | {row['session_wall_s']:.0f} | {row['overhead_share']:.1%} |")
    if "ray-p1" in rows and "local-p1" in rows:
        extra = rows["ray-p1"]["stage_overhead_s"] - rows["local-p1"]["stage_overhead_s"]
        lines += ["", f"Ray's overhead per stage over the local executor (sequential): {extra:+.1f} s. "
                      "Each stage is a Ray job: its submission and scheduling, then a fresh interpreter that "
                      "imports the training stack once for the stage's training and scoring (a warm worker "
                      "inside the job), where the local executor forks both from a worker that imported it "
                      "once per session."]
    if quality:
        lines += ["", f"## Search quality at equal stage budget (tree, {args.stages} stages, seeds "
                      f"{', '.join(map(str, args.seeds))}, max_steps 20)", "",
                  "| workers | median test | range | median session wall s |", "|---|---|---|---|"]
        for label in ("tree-p1", "tree-p2"):
            runs = [r for r in quality if r["strategy"] == label]
            tests = [r["best_test"] for r in runs]
            lines.append(f"| {label[-1]} | {statistics.median(tests):.3f} | [{min(tests):.3f}, {max(tests):.3f}] | "
                         f"{statistics.median(r['wall_seconds'] for r in runs):.0f} |")
        test = paired_test(quality, "tree-p2", "tree-p1")
        if test:
            lines += ["", f"Parallel minus sequential, paired by seed: {test['mean_difference'] * 100:+.1f} points "
                          f"({test['wins']} wins / {test['losses']} losses, sign-flip p = {test['p_value']:.2f})."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        last = json.loads((args.out / "scaling.json").read_text())
        (args.out / "scaling.md").write_text(report(last["throughput"], last["quality"], args))
        return 0
    last = json.loads((args.out / "scaling.json").read_text()) if (args.out / "scaling.json").exists() else {}
    rows = {**last.get("throughput", {}), **measure_throughput(args)}
    rows = {key: rows[key] for key in (f"{e}-p{n}" for e, n in WAYS) if key in rows}
    quality = last.get("quality", []) if args.skip_quality else measure_quality(args)
    (args.out / "scaling.json").write_text(json.dumps({"throughput": rows, "quality": quality}, indent=1))
    text = report(rows, quality, args)
    (args.out / "scaling.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
