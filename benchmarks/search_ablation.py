"""What each part of the tree search buys: the tree strategy with one part switched off
(or the schedule prior switched on), side by side with the full search, on the same seeds.

Runs on the policy-development seeds (0-99), never the seeds of the committed comparison
(benchmarks/search_efficiency.py uses 100 and up). Each variant is paired seed by seed
with the full search (exact sign-flip test on the winner's test accuracy).

    # 5 seeds per variant; 8 stages: ~4 min per variant on 2 cores
    .venv/bin/python benchmarks/search_ablation.py --work /tmp/ablation

Writes search_ablation-{template}-{stages}.{md,json} to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_efficiency import REPO, equal_compute_template, paired_test, run_session  # noqa: E402

VARIANTS = {  # label -> extra `autorl research` options
    "full": (),
    "no-memory": ("--ablate", "memory"),
    "steer-to-bound": ("--ablate", "steering-step"),
    "no-budget": ("--ablate", "budget"),
    "local-steps": ("--local-steps",),
    "leaf-width-3": ("--leaf-width", "3"),
    "no-steering": ("--ablate", "steering"),
    "schedule-prior": ("--schedule-prior",),
    "depth-6": ("--max-depth", "6"),
}
MEANING = {
    "no-memory": "memory of collapses off",
    "steer-to-bound": "steering may move a parameter to its bound (not one step)",
    "no-budget": "policy ignores the remaining budget",
    "local-steps": "a child samples within one step of its parent's values (--local-steps)",
    "leaf-width-3": "a node one stage above the depth limit takes at most 3 children (--leaf-width 3)",
    "no-steering": "diagnosis steering off",
    "schedule-prior": "schedule prior on (capacity only grows along a path)",
    "depth-6": "schedules up to 6 stages deep instead of 3",
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--template", default="arith")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--train-steps", type=int, default=None,
                        help="a GRPO-step budget with the stage length free (max_steps searched), instead of --stages")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    if args.train_steps:
        args.steps = 0  # the template's own max_steps choices: the search sets each stage's length
    return args


def run_all(args: argparse.Namespace) -> list[dict]:
    log = args.work / "results.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    have = {(r["strategy"], r["seed"]) for r in done}
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(v, seed) for seed in seeds for v in args.variants if (v, seed) not in have]

    def run_and_record(job):
        variant, seed = job
        try:
            result = run_session("tree", seed, args, VARIANTS[variant], label=variant)
        except RuntimeError as exc:  # reported, not the end of the ablation
            print(f"{variant} seed {seed} FAILED: {str(exc).splitlines()[0]}", flush=True)
            return None
        with log.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(f"{variant} seed {seed}: val {result['best_val']:.3f}, test {result['best_test']:.3f}", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done += [r for r in pool.map(run_and_record, jobs) if r is not None]
    return [r for r in done if r["strategy"] in args.variants and r["seed"] in seeds]


def report(results: list[dict], args: argparse.Namespace) -> tuple[str, dict]:
    rows = ["| variant | test acc. median [min, max] | best val median | failed stages (all seeds) "
            "| vs full: mean diff (points), wins/losses, p |", "|---|---|---|---|---|"]
    table = {}
    for variant in args.variants:
        runs = [r for r in results if r["strategy"] == variant]
        if not runs:
            continue
        tests = [r["best_test"] for r in runs]
        paired = paired_test(results, variant, "full") if variant != "full" else None
        table[variant] = {"test_median": statistics.median(tests), "test_min": min(tests), "test_max": max(tests),
                          "val_median": statistics.median(r["best_val"] for r in runs),
                          "failed_stages": sum(r["failed_stages"] for r in runs), "vs_full": paired}
        versus = "—" if paired is None else (f"{100 * paired['mean_difference']:+.1f}, {paired['wins']}/"
                                             f"{paired['losses']}, p={paired['p_value']:.2f}")
        label = variant if variant == "full" else f"{variant} ({MEANING[variant]})"
        rows.append(f"| {label} | {table[variant]['test_median']:.3f} [{min(tests):.3f}, {max(tests):.3f}] | "
                    f"{table[variant]['val_median']:.3f} | {table[variant]['failed_stages']} | {versus} |")
    budget = (f"{args.train_steps} GRPO steps (stage length searched)" if args.train_steps
              else f"{args.stages} stages of {args.steps} GRPO steps")
    notes = ["", f"Tree strategy, template `{args.template}`, {budget}, "
             f"search seeds {args.first_seed}..{args.first_seed + args.seeds - 1} (policy-development seeds). "
             "'vs full' pairs each seed with the full search's session on the same seed; positive means the "
             "variant did better, i.e. the switched-off part cost accuracy when negative."]
    return "\n".join(rows + notes) + "\n", table


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    args.template_path = equal_compute_template(args)
    started = time.monotonic()
    results = run_all(args)
    text, table = report(results, args)
    text += f"Benchmark wall time (this invocation): {(time.monotonic() - started) / 60:.1f} min.\n"
    stem = f"search_ablation-{args.template}-" + (f"{args.train_steps}steps" if args.train_steps else f"{args.stages}")
    (args.out / f"{stem}.md").write_text(f"# What each part of the tree search buys\n\n{text}")
    (args.out / f"{stem}.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                       "summary": table, "sessions": results}, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
