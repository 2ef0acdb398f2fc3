"""Where a session's time goes, cold vs warm workers, side by side in one run.

Runs the default session (`autorl research` on the arith template, 8 stages, tree
search, seed 0) twice on this machine, once with `--workers cold` and once with
`--workers warm`, then reads both back with `autorl show --json` and compares:

  - per-stage `start_s` (launch to first logged GRPO step), `train_s`, `save_s`,
    `eval_s`, the generation inside it, and the stage's wall time;
  - the session's `overhead_share` (wall time not spent in GRPO steps or evaluation
    generation) and its wall time;
  - whether the same specs and seeds gave the same validation scores;
  - GRPO steps/s inside autorl against the same `train.py` run bare (no sandbox, no
    controller) with the same specs, interleaved with nothing else running;
  - the worker's resident memory and each trial's peak memory (its cgroup's).

    .venv/bin/python benchmarks/stage_overhead.py [--stages 8] [--bare 3]

Writes benchmarks/results/stage_overhead.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AUTORL = [sys.executable, "-m", "autorl"]
PHASES = ("start_s", "train_s", "save_s", "eval_s")


class RssWatcher:
    """Samples the resident memory of the session's warm worker while it runs."""

    def __init__(self):
        self.peak_bytes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.watch, daemon=True)

    def watch(self) -> None:
        while not self.stop.wait(0.5):
            zygotes = {pid: parent for pid, parent in self.zygote_processes()}
            # The worker is the zygote whose parent is not one: its forks are trials and monitors.
            for pid in (pid for pid, parent in zygotes.items() if parent not in zygotes):
                try:
                    status = Path(f"/proc/{pid}/status").read_text().splitlines()
                    rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
                    self.peak_bytes = max(self.peak_bytes, rss)
                except (OSError, StopIteration, ValueError):
                    continue

    @staticmethod
    def zygote_processes():
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and b"sandbox.zygote" in (entry / "cmdline").read_bytes() \
                        and b"bwrap" not in (entry / "cmdline").read_bytes().split(b"\0")[0]:
                    status = (entry / "status").read_text().splitlines()
                    yield int(entry.name), next(int(line.split()[1]) for line in status if line.startswith("PPid:"))
            except (OSError, StopIteration, ValueError):
                continue


def run_session(runs: Path, name: str, workers: str, stages: int) -> dict:
    watcher = RssWatcher()
    watcher.thread.start()
    started = time.monotonic()
    done = subprocess.run([*AUTORL, "research", "get 3-digit addition past 65% accuracy", "--stages", str(stages),
                           "--seed", "0", "--name", name, "--workers", workers, "--runs-dir", str(runs)],
                          cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    watcher.stop.set()
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    shown = subprocess.run([*AUTORL, "show", name, "--json", "--runs-dir", str(runs)], cwd=REPO,
                           capture_output=True, text=True, check=True)
    return {"wall": wall, "data": json.loads(shown.stdout), "worker_rss": watcher.peak_bytes}


def bare_steps_per_second(runs: Path, session: str, node: dict, scratch: Path) -> float:
    """The node's spec, trained by ``python train.py`` alone in a fresh folder."""
    session_dir = runs / "sessions" / session
    spec = json.loads((session_dir / "nodes" / node["id"] / "spec.json").read_text())
    out = scratch / f"bare-{session}-{node['id']}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    spec.update(output_dir=str(out), metrics_path=str(out / "metrics.jsonl"))
    (out / "spec.json").write_text(json.dumps(spec))
    workspace = session_dir / "workspace"
    subprocess.run(["git", "-C", str(workspace), "checkout", "-q", node["commit"], "--", "train.py"], check=True)
    env = {key: os.environ[key] for key in ("PATH", "LANG") if key in os.environ} | {"HOME": str(out),
                                                                                   "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, str(workspace / "train.py"), "--spec", str(out / "spec.json")], cwd=out, env=env,
                   check=True, capture_output=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    runtime = next(r["train_runtime"] for r in records if "train_runtime" in r)
    return spec["max_steps"] / runtime


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarise(result: dict) -> dict:
    nodes = [n for n in result["data"]["nodes"] if n["timing"]]
    summary = {phase: median([n["timing"].get(phase, float("nan")) for n in nodes]) for phase in PHASES}
    summary.update(
        eval_generation_s=median([n["timing"].get("eval_generation_s", float("nan")) for n in nodes]),
        stage_wall_s=median([n["timing"].get("stage_wall_s", float("nan")) for n in nodes]),
        steps_per_s=median([n["steps"] / n["timing"]["steps_s"] for n in nodes if n["timing"].get("steps_s")]),
        overhead_share=result["data"]["overhead_share"],
        waiting_s_per_stage=(result["data"]["seconds"] - result["data"]["productive_seconds"]) / len(nodes),
        session_seconds=result["data"]["seconds"],
        command_wall_s=result["wall"],
        workers=sorted({n["worker"] for n in nodes}),
        peak_trial_memory_mb=max((n.get("peak_memory_mb") or 0) for n in nodes),
        worker_rss_mb=result["worker_rss"] / 2**20,
        scores=[n["val_score"] for n in result["data"]["nodes"]],
    )
    return summary


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    bottom = [0.0, 0.0]
    labels = list(results)
    for phase in (*PHASES, "bookkeeping"):
        values = []
        for label in labels:
            s = results[label]["summary"]
            if phase == "bookkeeping":
                per_stage = s["session_seconds"] / len(s["scores"])
                values.append(max(0.0, per_stage - sum(s[p] for p in PHASES)))
            else:
                values.append(s[phase])
        left.bar(labels, values, bottom=bottom, label=phase.removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, values)]
    left.set_ylabel("seconds per stage")
    left.set_title("one stage (median phases; bookkeeping = the rest)", fontsize=10)
    left.legend()
    for label in labels:
        starts = [n["timing"].get("start_s") for n in results[label]["data"]["nodes"] if n["timing"]]
        right.plot(range(1, len(starts) + 1), starts, marker="o", label=label)
    right.set_xlabel("stage")
    right.set_ylabel("start_s: launch to first logged GRPO step (s)")
    right.set_title("start-up per stage")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def report(results: dict[str, dict], bare: dict[str, list[tuple[float, float]]], args) -> str:
    cold, warm = results["cold"]["summary"], results["warm"]["summary"]
    rows = [
        ("start_s median (launch → first GRPO step)", "≤ 2 s warm", cold["start_s"], warm["start_s"]),
        ("train_s median", "", cold["train_s"], warm["train_s"]),
        ("save_s median", "", cold["save_s"], warm["save_s"]),
        ("eval_s median (generation inside)", "", f"{cold['eval_s']:.2f} ({cold['eval_generation_s']:.2f})",
         f"{warm['eval_s']:.2f} ({warm['eval_generation_s']:.2f})"),
        ("stage_wall_s median", "", cold["stage_wall_s"], warm["stage_wall_s"]),
        ("overhead_share of the session", "≤ 10% warm", f"{cold['overhead_share']:.1%}",
         f"{warm['overhead_share']:.1%}"),
        ("not training or generating, seconds per stage", "", cold["waiting_s_per_stage"], warm["waiting_s_per_stage"]),
        ("session wall (controller's clock)", "", cold["session_seconds"], warm["session_seconds"]),
        ("`autorl research` command wall", "", cold["command_wall_s"], warm["command_wall_s"]),
        ("peak trial memory (cgroup), MiB", "", cold["peak_trial_memory_mb"], warm["peak_trial_memory_mb"]),
        ("warm worker RSS, MiB", "", "-", warm["worker_rss_mb"]),
        ("workers used", "", ", ".join(cold["workers"]), ", ".join(warm["workers"])),
    ]
    fmt = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = [
        "# Stage overhead: cold vs warm workers",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} on this machine ({os.cpu_count()} CPUs, no GPU), idle otherwise, by",
        f"`benchmarks/stage_overhead.py --stages {args.stages} --bare {args.bare}`: the default `arith` session",
        "(tree search, seed 0), once per worker kind, one after the other in one run.",
        "",
        "| | target | cold | warm |",
        "|---|---|---|---|",
        *[f"| {name} | {target} | {fmt(c)} | {fmt(w)} |" for name, target, c, w in rows],
        "",
        "Same specs and seeds, same validation scores: "
        + ("**yes**, every node" if cold["scores"] == warm["scores"] else
           f"**no**: cold {cold['scores']} vs warm {warm['scores']}"),
        "",
        "GRPO steps/s inside autorl vs the same `train.py` and spec run bare (`python train.py`, no sandbox):",
        "",
        "| worker | node | inside autorl | bare | ratio (target ≥ 0.97) |",
        "|---|---|---|---|---|",
    ]
    for label, pairs in bare.items():
        for node_id, inside, alone in pairs:
            lines.append(f"| {label} | {node_id} | {inside:.2f} | {alone:.2f} | {inside / alone:.3f} |")
    lines += ["", "![cold vs warm](stage_overhead.png)", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--bare", type=int, default=3, help="nodes per session re-run bare for steps/s")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "stage_overhead.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="autorl-overhead-") as tmp:
        runs, results, bare = Path(tmp) / "runs", {}, {}
        for workers in ("cold", "warm"):
            result = run_session(runs, f"overhead-{workers}", workers, args.stages)
            result["summary"] = summarise(result)
            results[workers] = result
            print(workers, json.dumps(result["summary"]), flush=True)
        for workers, result in results.items():
            nodes = [n for n in result["data"]["nodes"] if n["timing"].get("steps_s")][: args.bare]
            bare[workers] = [(n["id"], n["steps"] / n["timing"]["steps_s"],
                              bare_steps_per_second(runs, f"overhead-{workers}", n, Path(tmp)))
                             for n in nodes]
        plot(results, args.out.with_suffix(".png"))
        args.out.write_text(report(results, bare, args))
        args.out.with_suffix(".json").write_text(json.dumps({"results": results, "bare": bare}, indent=1))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
