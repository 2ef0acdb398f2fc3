"""Search efficiency: every strategy at the same stage budget, several search seeds each.

Each (strategy, seed) is one real `autorl research` session on the CPU template, in
its own runs directory. The search sees only the validation split; the winner of each
session is scored once on the test split by the session itself. This script reads the
sessions back from MLflow (`autorl show --json`) and reports, per strategy:

- median and spread (min..max) of the winner's test accuracy, and its gain over the
  base model;
- the median test accuracy relative to grid's (the form LLMZero reports: +6-15%);
- stages needed to reach grid's median best validation score (best-so-far curve);
- wall time per session.

    .venv/bin/python benchmarks/search_efficiency.py              # full: 30 sessions; 8 stages ~20 min,
                                                                  # 24 stages ~70 min on 2 cores
    .venv/bin/python benchmarks/search_efficiency.py --quick      # CI smoke: tiny, minutes

Writes search_efficiency.{md,json,png} to --out (default benchmarks/results/).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = ("tree", "grid", "random", "optuna", "greedy", "pbt")
BASELINES = ("grid", "greedy", "pbt")  # the tree is compared with each, paired by seed


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=100,
                        help="search seeds are FIRST..FIRST+SEEDS-1; 0-99 are for developing the policy, the "
                             "committed results use 100 and up")
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=0,
                        help="the budget in GRPO training steps (autorl's own unit; stages free, max_steps free); "
                             "0: --stages with every stage fixed at --steps")
    parser.add_argument("--jobs", type=int, default=2, help="sessions run side by side (one torch thread each)")
    parser.add_argument("--template", default="arith")
    parser.add_argument("--steps", type=int, default=20,
                        help="fix max_steps of every stage, so a stage budget is a compute budget (0: leave it free)")
    parser.add_argument("--work", type=Path, default=None,
                        help="where the sessions' runs go [a temp dir]; rerunning with the same --work skips "
                             "sessions already recorded there")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--max-depth", type=int, default=None,
                        help="--max-depth of every session (default: autorl's); "
                             "written as search_efficiency-T-S-depthD")
    parser.add_argument("--versus", default=",".join(BASELINES),
                        help="strategies (or labels recorded in WORK/results.jsonl, e.g. an earlier tree) the tree "
                             "is paired with")
    parser.add_argument("--quick", action="store_true", help="CI smoke: tree and grid, 1 seed, 2 stages of 10 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.strategies, args.seeds, args.stages, args.steps = "tree,grid", 1, 2, 10
    if args.train_steps:
        args.steps = 0  # the stage length is the search's to choose: the budget is what it trains
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.versus = [s for s in args.versus.split(",") if s]
    return args


def equal_compute_template(args: argparse.Namespace) -> str:
    """A copy of the template whose ``max_steps`` is fixed: every stage costs the same compute."""
    if not args.steps:
        return args.template
    from autorl.stages import template as templates

    dest = args.work / "template"
    if not dest.exists():
        templates.copy_to(templates.load(args.template), dest)
        space = dest / "space.toml"
        space.write_text(re.sub(r"(\[max_steps\]\ntype = \"categorical\"\nchoices = )\[[^\]]*\]\ndefault = \d+",
                                rf"\g<1>[{args.steps}]\ndefault = {args.steps}", space.read_text()))
    return str(dest)


def run_session(strategy: str, seed: int, args: argparse.Namespace, extra: tuple[str, ...] = (),
                label: str | None = None) -> dict:
    """One session through the real CLI (``extra``: more `research` options, for a variant
    recorded as ``label``); returns its `show --json` plus its wall time."""
    if getattr(args, "max_depth", None):
        extra = (*extra, "--max-depth", str(args.max_depth))
    if "--memory" not in extra:  # a comparison gives each strategy the same information: none from earlier sessions
        extra = (*extra, "--memory", "off")
    label = label or strategy
    runs = args.work / f"{label}-{seed}"
    name = f"bench-{label}-{seed}"
    shutil.rmtree(runs, ignore_errors=True)  # a session not in results.jsonl failed or was cut short: run it afresh
    env = {**os.environ, "AUTORL_RUNS_DIR": str(runs), "OMP_NUM_THREADS": "1" if args.jobs > 1 else "2"}
    command = [sys.executable, "-m", "autorl"]
    started = time.monotonic()
    budget = ("--train-steps", str(args.train_steps)) if args.train_steps else ("--stages", str(args.stages))
    done = subprocess.run([*command, "research", f"benchmark {strategy}", "--template", args.template_path,
                           "--strategy", strategy, "--seed", str(seed), *budget,
                           "--name", name, *extra], capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    shown = subprocess.run([*command, "show", name, "--json"], capture_output=True, text=True, env=env,
                           cwd=REPO, check=True)
    data = json.loads(shown.stdout)
    return {"strategy": label, "seed": seed, "wall_seconds": wall, **summarise(data)}


def summarise(data: dict) -> dict:
    """What the report needs from one session: validation best-so-far per stage, and the winner's test score."""
    best_so_far, best = [], float("-inf")
    for node in data["nodes"]:
        if node["val_score"] is not None:
            best = max(best, node["val_score"])
        best_so_far.append(best if best > float("-inf") else None)
    return {
        "session": data["name"], "base_val": data["base_score"], "base_test": data["base_test_score"],
        "best_val": data["best_val_score"], "best_test": data["best_test_score"],
        "best_test_stderr": data["best_test_stderr"], "best_so_far": best_so_far,
        "best_path": data["best"]["path"] if data["best"] else [],
        "best_schedule": winning_schedule(data),
        "failed_stages": sum(n["status"] == "failed" for n in data["nodes"]),
        "stages": len(data["nodes"]), "train_steps_spent": data.get("train_steps_spent"),
        "importance": data.get("importance"),
    }


def winning_schedule(data: dict) -> list[dict]:
    """The hyperparameters of each stage on the winner's path, first stage first."""
    nodes = {n["id"]: n for n in data["nodes"]}
    return [nodes[i]["hyperparameters"] for i in (data["best"]["path"] if data["best"] else []) if i in nodes]


def backfill_schedules(results: list[dict], args: argparse.Namespace) -> None:
    """Sessions recorded before ``best_schedule`` was kept: read it back from their store."""
    for result in (r for r in results if "best_schedule" not in r):
        runs = args.work / result["session"].removeprefix("bench-")
        shown = subprocess.run([sys.executable, "-m", "autorl", "show", result["session"], "--json"],
                               capture_output=True, text=True, env={**os.environ, "AUTORL_RUNS_DIR": str(runs)},
                               cwd=REPO)
        result["best_schedule"] = winning_schedule(json.loads(shown.stdout)) if shown.returncode == 0 else []


MOVED_ROLES = {"learning_rate": "lr", "temperature": "T", "beta": "β", "num_generations": "G",
               "max_completion_length": "len"}


def schedule_shapes(runs: list[dict]) -> str:
    """How the winners' values move from stage to stage: per parameter, moves up / down / kept."""
    moves = {label: [0, 0, 0] for label in MOVED_ROLES.values()}
    multi = [r["best_schedule"] for r in runs if len(r.get("best_schedule") or []) > 1]
    for schedule in multi:
        for before, after in zip(schedule, schedule[1:]):
            for name, label in MOVED_ROLES.items():
                if name in before and name in after:
                    a, b = before[name], after[name]
                    moves[label][0 if b > a else 1 if b < a else 2] += 1
    parts = [f"{label} ↑{up} ↓{down} ={kept}" for label, (up, down, kept) in moves.items() if up + down + kept]
    return f"{len(multi)} multi-stage winners; " + (", ".join(parts) if parts else "—")


def paired_test(results: list[dict], strategy: str, baseline: str) -> dict | None:
    """The strategy's test score minus the baseline's, seed by seed, with an exact two-sided
    sign-flip permutation p-value (with 5 seeds the smallest possible p is 2/32 = 0.0625)."""
    by_seed = {(r["strategy"], r["seed"]): r["best_test"] for r in results}
    seeds = sorted({r["seed"] for r in results})
    diffs = [by_seed[(strategy, s)] - by_seed[(baseline, s)] for s in seeds
             if (strategy, s) in by_seed and (baseline, s) in by_seed]
    return sign_flip_test(diffs) if diffs else None


def sign_flip_test(diffs: list[float]) -> dict:
    """Mean, wins and losses of paired differences, with the exact two-sided sign-flip p-value."""
    observed = abs(sum(diffs))
    flips = [sum(d if (mask >> i) & 1 else -d for i, d in enumerate(diffs)) for mask in range(2 ** len(diffs))]
    p = sum(abs(total) >= observed - 1e-12 for total in flips) / len(flips)
    return {"mean_difference": sum(diffs) / len(diffs), "wins": sum(d > 0 for d in diffs),
            "losses": sum(d < 0 for d in diffs), "n": len(diffs), "p_value": p}


def stages_to_reach(curve: list, target: float) -> int | None:
    """First stage count at which a best-so-far curve reaches ``target`` (None: never)."""
    return next((i + 1 for i, value in enumerate(curve) if value is not None and value >= target), None)


def report(results: list[dict], args: argparse.Namespace) -> tuple[str, dict, dict]:
    by_strategy = {s: [r for r in results if r["strategy"] == s] for s in args.strategies}
    grid = by_strategy.get("grid") or []
    grid_test = statistics.median(r["best_test"] for r in grid) if grid else None
    grid_val = statistics.median(r["best_val"] for r in grid) if grid else None
    base_test = statistics.median(r["base_test"] for r in results)
    rows, table = [], {}
    header = ("| strategy | test acc. median [min, max] | gain over base (points) | vs grid (relative) "
              "| stages to grid's best val (median, reached/seeds) | stages, GRPO steps (median) | wall per session |")
    rows += [header, "|" + "---|" * 7]
    for strategy, runs in by_strategy.items():
        tests = [r["best_test"] for r in runs]
        median = statistics.median(tests)
        reach = [stages_to_reach(r["best_so_far"], grid_val) for r in runs] if grid_val is not None else []
        reached = [n for n in reach if n is not None]
        entry = {
            "test_median": median, "test_min": min(tests), "test_max": max(tests),
            "gain_over_base": median - base_test,
            "vs_grid_relative": (median - grid_test) / grid_test if grid_test else None,
            "stages_to_grid_best_median": statistics.median(reached) if reached else None,
            "reached_grid_best": f"{len(reached)}/{len(runs)}",
            "wall_seconds_median": statistics.median(r["wall_seconds"] for r in runs),
            "stages_median": statistics.median(r.get("stages", len(r["best_so_far"])) for r in runs),
            "train_steps_median": median_of(r.get("train_steps_spent") for r in runs),
        }
        table[strategy] = entry
        vs_grid = ("—" if strategy == "grid" or entry["vs_grid_relative"] is None
                   else f"{entry['vs_grid_relative']:+.1%}")
        to_grid = "—" if entry["stages_to_grid_best_median"] is None else f"{entry['stages_to_grid_best_median']:g}"
        rows.append(f"| {strategy} | {median:.3f} [{min(tests):.3f}, {max(tests):.3f}] | "
                    f"{100 * entry['gain_over_base']:+.1f} | {vs_grid} | {to_grid} ({entry['reached_grid_best']}) | "
                    f"{entry['stages_median']:g}, {fmt(entry['train_steps_median'])} | "
                    f"{entry['wall_seconds_median'] / 60:.1f} min |")
    comparisons = {}
    if "tree" in by_strategy:
        rows += ["", "Paired by search seed, tree against each baseline (test accuracy, exact sign-flip test):", "",
                 "| baseline | mean difference (points) | tree wins / losses | p (two-sided) |", "|---|---|---|---|"]
        for baseline in (b for b in getattr(args, "versus", BASELINES) if b in by_strategy):
            test = paired_test(results, "tree", baseline)
            if test is None:
                continue
            comparisons[baseline] = test
            rows.append(f"| {baseline} | {100 * test['mean_difference']:+.1f} | {test['wins']} / {test['losses']} "
                        f"(of {test['n']}) | {test['p_value']:.3f} |")
    stderr = statistics.median(r["best_test_stderr"] for r in results)
    budget = (f"{args.train_steps} GRPO training steps per session (stage count and length the strategy's "
              "choice)" if args.train_steps else f"{args.stages} stages per session")
    notes = [
        "", f"Budget: {budget}, {args.seeds} search seeds per strategy, template "
        f"`{args.template}`" + (f" with every stage fixed at {args.steps} GRPO steps (equal compute per stage)"
                                  if args.steps else "") + f", {args.jobs} sessions side by side.",
        f"Base model test accuracy {base_test:.3f}; one test score's standard error ≈ {stderr:.3f} "
        f"(1,000 problems), so differences of medians below ~{2 * stderr:.3f} are within noise.",
        "Grid's best validation score (median over seeds): " + ("—" if grid_val is None else f"{grid_val:.3f}") + ".",
        ceiling(results, grid_test),
        "Winning schedules (stages on the winner's path, per seed): " + "; ".join(
            f"{s} {[len(r['best_path']) for r in runs]}" for s, runs in by_strategy.items()) + ".",
        "", "Shape of the winning schedules (moves between consecutive stages of the winners' paths):", "",
        *[f"- {s}: {schedule_shapes(runs)}" for s, runs in by_strategy.items()],
        "", importance_summary(results),
    ]
    return "\n".join(rows + notes) + "\n", table, comparisons


def median_of(values) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def importance_summary(results: list[dict]) -> str:
    """Which knobs mattered, over the sessions: each parameter's fANOVA share of the variance
    of the gain over the parent (search/importance.py), averaged over the sessions that
    had enough scored stages to estimate it."""
    found = [r["importance"] for r in results if r.get("importance")]
    if not found:
        return "What mattered: no session had enough scored stages for an importance estimate."
    names = sorted({name for shares in found for name in shares})
    mean = {name: sum(shares.get(name, 0.0) for shares in found) / len(found) for name in names}
    ranked = ", ".join(f"{name} {share:.0%}" for name, share in sorted(mean.items(), key=lambda kv: -kv[1]))
    return (f"What mattered (fANOVA share of the variance of a stage's gain over its parent, mean over the "
            f"{len(found)} of {len(results)} sessions with enough scored stages): {ranked}.")


def ceiling(results: list[dict], grid_test: float | None) -> str:
    """What any strategy reached at this budget: the best validation score of any stage in
    any session here, against what 15% above grid's median would need."""
    best = max(results, key=lambda r: r["best_val"])
    text = (f"Best validation score of any stage in any session here: {best['best_val']:.3f} ({best['strategy']}, "
            f"seed {best['seed']}); best winner's test score: {max(r['best_test'] for r in results):.3f}")
    if grid_test:
        text += f"; 15% above grid's median test would be {1.15 * grid_test:.3f}"
    return text + "."


def plot(results: list[dict], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for strategy in args.strategies:
        curves = [r["best_so_far"] for r in results if r["strategy"] == strategy]
        stages = range(1, max(len(c) for c in curves) + 1)
        columns = [[c[i] for c in curves if i < len(c) and c[i] is not None] for i in range(len(stages))]
        medians = [statistics.median(col) if col else float("nan") for col in columns]
        low = [min(col) if col else float("nan") for col in columns]
        high = [max(col) if col else float("nan") for col in columns]
        line, = ax.plot(list(stages), medians, marker="o", label=strategy)
        ax.fill_between(list(stages), low, high, color=line.get_color(), alpha=0.12)
    ax.set_xlabel("stages spent")
    ax.set_ylabel("best validation accuracy so far")
    ax.set_title(f"best so far: median and range over {args.seeds} seeds")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_all(args: argparse.Namespace) -> list[dict]:
    """Run every (strategy, seed) session not already recorded in WORK/results.jsonl."""
    log = args.work / "results.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    have = {(r["strategy"], r["seed"]) for r in done}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(s, seed) for seed in seeds for s in args.strategies if (s, seed) not in have]

    def run_and_record(job):
        try:
            result = run_session(*job, args)
        except RuntimeError as exc:  # one broken session is reported, not the end of the benchmark
            with (args.work / "failures.jsonl").open("a") as handle:
                handle.write(json.dumps({"strategy": job[0], "seed": job[1], "error": str(exc)[-3000:]}) + "\n")
            print(f"{job[0]} seed {job[1]} FAILED: {str(exc).splitlines()[0]}", flush=True)
            return None
        with log.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(f"{result['session']}: best val {result['best_val']:.3f}, test {result['best_test']:.3f}, "
              f"{result['wall_seconds'] / 60:.1f} min", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done += [r for r in pool.map(run_and_record, jobs) if r is not None]
    return [r for r in done if r["strategy"] in args.strategies and r["seed"] in seeds]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.work is None:
        import tempfile

        args.work = Path(tempfile.mkdtemp(prefix="autorl-bench-"))
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    args.template_path = equal_compute_template(args)
    started = time.monotonic()
    results = run_all(args)
    backfill_schedules(results, args)
    text, table, paired = report(results, args)
    failures = args.work / "failures.jsonl"
    if failures.exists() and failures.read_text().strip():
        recorded = {(r["strategy"], r["seed"]) for r in results}
        failed = [f for f in map(json.loads, failures.read_text().splitlines())
                  if (f["strategy"], f["seed"]) not in recorded]  # a rerun that succeeded is in the table
        if failed:
            text += "Sessions that failed (not in the table): " + "; ".join(
                f"{f['strategy']} seed {f['seed']}: {f['error'].strip().splitlines()[-1][:200]}"
                for f in failed) + ".\n"
    text += f"Benchmark wall time (this invocation): {(time.monotonic() - started) / 60:.1f} min.\n"
    size = f"{args.train_steps}steps" if args.train_steps else str(args.stages)
    stem = "search_efficiency_quick" if args.quick else f"search_efficiency-{args.template}-{size}"
    stem += f"-depth{args.max_depth}" if args.max_depth else ""
    (args.out / f"{stem}.md").write_text(f"# Search efficiency\n\n{text}")
    (args.out / f"{stem}.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                       "summary": table, "tree_paired": paired,
                                                       "sessions": results}, indent=2))
    plot(results, args, args.out / f"{stem}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
