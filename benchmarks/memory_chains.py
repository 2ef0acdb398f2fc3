"""What memory across sessions is worth: chains of sessions in one store, each reading the ones before it.

A chain is ``--length`` sessions of one strategy on one template, run one after another
into one tracking store with `--memory on` (the default): session k reads sessions
1..k-1 and nothing else (every chain has a store of its own). The search seed is the same
for every session of a chain, so what changes from one session to the next is what memory
holds (and, for the LLM strategies, the model's replies). LLM sessions answer through a
relay of their own (`../shared/relay/`), one fresh model per session: a model that
answered an earlier session of the chain would carry memory the tree search does not get.

    .venv/bin/python benchmarks/memory_chains.py --template digitsort --train-steps 160 \\
        --strategies llm,tree --chains 3 --work /tmp/memory-bench

Rerunning with the same --work adopts the sessions that finished there. Writes
memory-<template>.{json,md} to --out: ``{"chains": [{strategy, seed, best_tests: [...]}]}``
and, per strategy, the median first and last session and their paired difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_search import ANSWERED_BY, LLM_STRATEGIES, finished, llm_usage, relay, show  # noqa: E402
from search_efficiency import REPO, sign_flip_test, summarise  # noqa: E402

TARGET_POINTS = 2.0  # what the LLM chains' median last session must beat their median first session by


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="digitsort")
    parser.add_argument("--train-steps", type=int, default=160)
    parser.add_argument("--strategies", default="llm,tree")
    parser.add_argument("--chains", type=int, default=3, help="chains per strategy (search seeds from --first-seed)")
    parser.add_argument("--length", type=int, default=3, help="sessions per chain")
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=6, help="chains run side by side")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--relay", type=Path, default=REPO.parent / "shared" / "relay")
    parser.add_argument("--llm-timeout", type=float, default=900.0)
    parser.add_argument("--report-only", action="store_true", help="write the report from what WORK holds")
    args = parser.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.seed_list = list(range(args.first_seed, args.first_seed + args.chains))
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=REPO).stdout.strip()
    return args


def session_name(strategy: str, seed: int, k: int) -> str:
    return f"chain-{strategy}-{seed}-s{k}"


def run_session(strategy: str, seed: int, k: int, args: argparse.Namespace) -> dict:
    """Session k of a chain through the real CLI, into the chain's store, memory on."""
    runs, name = args.work / f"{strategy}-{seed}", session_name(strategy, seed, k)
    if (done := finished(runs, name)) is not None:
        return {"wall_seconds": done.get("seconds") or 0.0, "adopted": True, **summarise(done)}
    command = [sys.executable, "-m", "autorl", "research", f"benchmark {strategy}", "--template", args.template,
               "--strategy", strategy, "--seed", str(seed), "--train-steps", str(args.train_steps),
               "--name", name, "--memory", "on"]
    env = {**os.environ, "AUTORL_RUNS_DIR": str(runs), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    if strategy in LLM_STRATEGIES:
        with relay(args.work / "relay" / name, args.relay) as url:
            done = subprocess.run([*command, "--llm", "relay-model", "--llm-base-url", url, "--llm-timeout",
                                   str(args.llm_timeout)], capture_output=True, text=True, env=env, cwd=REPO)
    else:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {"wall_seconds": wall, "commit": args.commit, **summarise(show(runs, name))}


def run_chain(strategy: str, seed: int, args: argparse.Namespace) -> dict:
    """One chain, session by session; a session that fails ends its chain (what ran is kept)."""
    runs = args.work / f"{strategy}-{seed}"
    sessions, error = [], None
    for k in range(1, args.length + 1):
        try:
            result = run_session(strategy, seed, k, args)
        except Exception as exc:  # reported in the results, not the end of the other chains
            error = str(exc)[-3000:]
            print(f"{session_name(strategy, seed, k)} FAILED: {exc}", flush=True)
            break
        data = show(runs, result["session"])
        result["memory"] = data.get("memory")
        if strategy in LLM_STRATEGIES:
            result |= llm_usage(runs / "sessions" / result["session"], data.get("counters") or {})
        sessions.append(result)
        print(f"{result['session']}: test {result['best_test']:.3f} (memory: {result['memory']})", flush=True)
    return {"strategy": strategy, "seed": seed, "best_tests": [s["best_test"] for s in sessions],
            "sessions": sessions, "error": error}


def strategy_summary(chains: list[dict], length: int) -> dict:
    """Median score of each session position, and last against first paired by chain."""
    whole = [c for c in chains if len(c["best_tests"]) == length]
    if not whole:
        return {"chains": 0}
    by_position = [statistics.median(c["best_tests"][k] for c in whole) for k in range(length)]
    gains = [c["best_tests"][-1] - c["best_tests"][0] for c in whole]
    return {"chains": len(whole), "median_by_session": by_position,
            "median_gain_points": 100 * (by_position[-1] - by_position[0]),
            "last_minus_first": sign_flip_test(gains)}


def report(chains: list[dict], args: argparse.Namespace) -> tuple[str, dict]:
    summary = {s: strategy_summary([c for c in chains if c["strategy"] == s], args.length) for s in args.strategies}
    header = " | ".join(f"session {k}" for k in range(1, args.length + 1))
    rows = [f"| strategy | seed | {header} |", "|---|---|" + "---|" * args.length]
    for chain in sorted(chains, key=lambda c: (c["strategy"], c["seed"])):
        cells = [f"{t:.3f}" for t in chain["best_tests"]] + ["failed" if chain["error"] else "—"]
        cells = (cells + ["—"] * args.length)[:args.length]
        rows.append(f"| {chain['strategy']} | {chain['seed']} | " + " | ".join(cells) + " |")
    rows += ["", "Median over whole chains (test accuracy of each session's winner):", ""]
    for strategy, entry in summary.items():
        if not entry["chains"]:
            rows.append(f"- {strategy}: no whole chain")
            continue
        test = entry["last_minus_first"]
        medians = " → ".join(f"{m:.3f}" for m in entry["median_by_session"])
        rows.append(f"- {strategy} ({entry['chains']} chains): {medians}; last minus first "
                    f"{entry['median_gain_points']:+.1f} points (medians), paired by chain "
                    f"{100 * test['mean_difference']:+.1f} on average, {test['wins']} gains / {test['losses']} "
                    f"losses, sign-flip p = {test['p_value']:.3f}")
    llm = [s for s in args.strategies if s in LLM_STRATEGIES and summary[s]["chains"]]
    met = {s: summary[s]["median_gain_points"] >= TARGET_POINTS for s in llm}
    rows += ["", "What each session read (its memory line):", ""]
    for chain in sorted(chains, key=lambda c: (c["strategy"], c["seed"])):
        for s in chain["sessions"]:
            rows.append(f"- {s['session']}: {s['best_test']:.3f}; {s.get('memory') or 'nothing'}")
        if chain["error"]:
            rows.append(f"- {chain['strategy']} {chain['seed']}: chain ended by a failure: "
                        f"{chain['error'].strip().splitlines()[-1] if chain['error'].strip() else '?'}")
    ran_on = sorted({s["commit"] for c in chains for s in c["sessions"] if s.get("commit")}) or [args.commit]
    rows += ["", f"Target: the LLM chains' median last session at least {TARGET_POINTS:g} points above their median "
                 f"first session: " + (", ".join(f"{s} {'met' if ok else 'not met'}" for s, ok in met.items()) or "—"),
             "", "Every session of a chain runs the chain's search seed, so a stage with the same parent, values, "
                 "train.py and node number as an earlier session's trains with the same seed and reproduces its score "
                 "exactly: a session can replay an earlier path without its noise, which sessions with other seeds "
                 "could not.",
             "", f"Budget {args.train_steps} GRPO steps per session, template `{args.template}`, search seeds "
                 f"{args.seed_list[0]}–{args.seed_list[-1]} (one per chain), {args.length} sessions per chain, memory "
                 f"on, code {', '.join(ran_on)}; the LLM was {ANSWERED_BY}, one fresh model per session."]
    return "\n".join(rows) + "\n", {"summary": summary, "target_points": TARGET_POINTS, "met": met}


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "chains.json"
    started = time.monotonic()
    if args.report_only:
        chains = json.loads(log.read_text())
    else:
        jobs = [(s, seed) for s in args.strategies for seed in args.seed_list]
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            chains = list(pool.map(lambda job: run_chain(*job, args), jobs))
        log.write_text(json.dumps(chains, indent=2))
    text, numbers = report(chains, args)
    if not args.report_only:
        text += f"Benchmark wall time (this invocation): {(time.monotonic() - started) / 60:.1f} min.\n"
    stem = f"memory-{args.template}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(f"# Memory across sessions: chains of sessions\n\n{text}")
    (args.out / f"{stem}.json").write_text(json.dumps({
        "template": args.template, "train_steps": args.train_steps, "length": args.length, "memory": True,
        "answered_by": ANSWERED_BY, **numbers, "chains": chains}, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
