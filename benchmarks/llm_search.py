"""The LLM strategies against every hyperparameter search, at the same GRPO-step budget.

`hybrid` (the model sets centre and ranges, TPE draws) and `llm` (the model sets values
and may edit train.py) run through an OpenAI-compatible relay on loopback
(`../shared/relay/`): whoever answers its requests is the model. Beside them, `tree`,
`grid`, `greedy`, `pbt` and the no-search control `defaults` run at the same
`--train-steps` and search seeds. Every
session is a real `autorl research` run; its winner is scored once on the test split by
the session itself. A winner whose path edited train.py is then replayed without its
edits (autorl/replay.py): the paired test difference is the edits' worth.

    .venv/bin/python benchmarks/llm_search.py --template digitsort --train-steps 160 --seeds 3 \\
        --work /tmp/llm-bench [--strategies llm,hybrid] [--baselines-from FILE.json]

Each LLM session prints the relay folder to answer (`relay_ctl.py next DIR --wait 600`).
Rerunning with the same --work skips sessions already recorded there. `--baselines-from`
takes baseline sessions (same template, budget and seeds) from a committed
search_efficiency JSON instead of running them again; each keeps its source.

Writes llm_search-<template>.{json,md} to --out (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_efficiency import REPO, paired_test, run_session, sign_flip_test, summarise  # noqa: E402

LLM_STRATEGIES = ("hybrid", "llm")
BASELINES = ("tree", "grid", "greedy", "pbt")
CONTROLS = ("defaults",)  # no search: the space's defaults down one path for the whole budget
COMPARED = BASELINES + CONTROLS
ANSWERED_BY = "a strong hosted model shown only each request, through a loopback relay (../shared/relay/)"
REPLAY_WALL_FACTOR = 4.0  # replays run beside other sessions: the session's stage limit, four times over
MARGIN_POINTS = 5.0  # what the LLM's median must beat the best baseline's median by


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="digitsort")
    parser.add_argument("--train-steps", type=int, default=160)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--strategies", default=",".join(LLM_STRATEGIES + COMPARED))
    parser.add_argument("--jobs", type=int, default=2, help="sessions run side by side")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--relay", type=Path, default=REPO.parent / "shared" / "relay")
    parser.add_argument("--llm-timeout", type=float, default=600.0)
    parser.add_argument("--llm-prompt-tokens", type=int, default=None,
                        help="autorl's --llm-prompt-tokens for the LLM sessions (default: autorl's own)")
    parser.add_argument("--baselines-from", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true", help="write the report from what WORK holds")
    parser.add_argument("--suffix", default="", help="results file stem suffix, e.g. 'clean' -> llm_search-T-clean")
    parser.add_argument("--brief-search-results", action="store_true",
                        help="record that the template's brief states what earlier searches measured")
    args = parser.parse_args(argv)
    args.strategies = [s for s in args.strategies.split(",") if s]
    args.seed_list = list(range(args.first_seed, args.first_seed + args.seeds))
    args.steps, args.max_depth = 0, None  # search_efficiency's options: stage length free, autorl's depth
    args.template_path = args.template
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=REPO).stdout.strip()
    return args


@contextmanager
def relay(folder: Path, relay_dir: Path):
    """A relay server on loopback answering from ``folder``; yields its base URL."""
    folder.mkdir(parents=True, exist_ok=True)
    server = subprocess.Popen([sys.executable, str(relay_dir / "relay_server.py"), str(folder)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().strip())
        print(f"answer the requests in {folder} (relay_ctl.py next {folder} --wait 600)", flush=True)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        (folder / "DONE").touch()
        server.terminate()
        server.wait(timeout=30)


def llm_usage(session_dir: Path, counters: dict) -> dict:
    """Requests, repairs and tokens of one session, from its reply log and counters."""
    keys = []
    log = session_dir / "llm_replies.jsonl"
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            keys.append(json.loads(line)["key"].split(":")[0])
        except (json.JSONDecodeError, KeyError):
            continue
    return {"requests": len(keys), "repairs": sum(not key.endswith(".r0") for key in keys),
            "tokens": int(counters.get("llm_total_tokens", 0))}


def relay_prompt_chars(folder: Path) -> int:
    """Characters of every message the session sent through its relay (the relay reports no
    token counts; a provider's tokenizer makes about a quarter as many tokens)."""
    total = 0
    for request in sorted(folder.glob("req-*.json")):
        try:
            total += sum(len(m.get("content") or "") for m in json.loads(request.read_text()).get("messages", []))
        except (json.JSONDecodeError, AttributeError):
            continue
    return total


def show(runs: Path, name: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "autorl", "show", name, "--json"], capture_output=True, text=True,
                          env={**os.environ, "AUTORL_RUNS_DIR": str(runs)}, cwd=REPO, check=True)
    return json.loads(done.stdout)


def finished(runs: Path, name: str) -> dict | None:
    """A session that already ran to its end in WORK (its benchmark process died after it)."""
    if not (runs / "mlflow.db").exists():
        return None
    try:
        data = show(runs, name)
    except subprocess.CalledProcessError:
        return None
    return data if data["status"] == "finished" else None


def run_one(strategy: str, seed: int, args: argparse.Namespace) -> dict:
    """One session through the CLI (the LLM ones through a relay of their own), or the
    finished session WORK already holds: a session is never paid for twice."""
    runs, name = args.work / f"{strategy}-{seed}", f"bench-{strategy}-{seed}"
    code = runs / "code.txt"  # the commit a session started on, for one adopted later
    if (done := finished(runs, name)) is not None:
        result = {"strategy": strategy, "seed": seed, "wall_seconds": done.get("seconds") or 0.0, **summarise(done),
                  "adopted": True}
    elif strategy in LLM_STRATEGIES:
        with relay(args.work / "relay" / f"{strategy}-{seed}", args.relay) as url:
            bound = ("--llm-prompt-tokens", str(args.llm_prompt_tokens)) if args.llm_prompt_tokens else ()
            result = run_session(strategy, seed, args, extra=("--llm", "relay-model", "--llm-base-url", url,
                                                              "--llm-timeout", str(args.llm_timeout), *bound))
    else:
        result = run_session(strategy, seed, args)
    if result.get("adopted"):
        result["commit"] = code.read_text().strip() if code.is_file() else None
    else:
        code.write_text(args.commit)
        result["commit"] = args.commit  # the code (the prompt) the session ran
    data = show(runs, name)
    nodes = {n["id"]: n for n in data["nodes"]}
    result["winner_edited"] = any(nodes[i].get("edited") for i in result["best_path"] if i in nodes)
    result["edited_stages"] = sum(bool(n.get("edited")) for n in data["nodes"])
    result["train_steps"] = result.pop("train_steps_spent", None)
    result["source"] = "this benchmark"
    if strategy in LLM_STRATEGIES:
        result |= llm_usage(runs / "sessions" / result["session"], data.get("counters") or {})
    return result


def ablate(result: dict, args: argparse.Namespace) -> dict | None:
    """The winner's schedule replayed with the template's train.py (only when it edited)."""
    if not result.get("winner_edited"):
        return None
    from autorl.replay import edit_worth
    from autorl.stages import template as templates
    from sandbox import choose_sandbox

    template = templates.load(args.template)
    runs = args.work / f"{result['strategy']}-{result['seed']}"
    work = args.work / "ablation" / f"{result['strategy']}-{result['seed']}"
    shutil.rmtree(work, ignore_errors=True)  # what an attempt that failed left
    worth = edit_worth(runs / "sessions" / result["session"], result["best_path"], template, work,
                       choose_sandbox("auto"), stage_sd=template.stage_sd, wall_factor=REPLAY_WALL_FACTOR,
                       winner_checkpoint=winner_checkpoint(runs, result["session"], work))
    return worth.to_dict()


def winner_checkpoint(runs: Path, session: str, work: Path) -> Path | None:
    """The winner's checkpoint from its run's artifact store (None: a session that kept it in its folder)."""
    from autorl.storage.report import show_session
    from autorl.storage.tracking import Tracker

    tracker = Tracker.for_runs_dir(runs)
    best = show_session(tracker, session)["best"]
    if best.get("checkpoint") != "stored":
        return None
    return tracker.checkpoints.fetch(best["mlflow_run_id"], work / "winner-checkpoint")


def baselines_from(path: Path, args: argparse.Namespace) -> list[dict]:
    """Committed baseline sessions of the same template, budget and seeds, from a
    search_efficiency or an earlier llm_search file; a baseline this run is asked to run
    (in --strategies: its code changed) is not taken."""
    data = json.loads(path.read_text())
    meta = data.get("args") or {"template": data.get("template"), "train_steps": str(data.get("train_steps"))}
    if meta.get("template") != args.template or str(meta.get("train_steps")) != str(args.train_steps):
        raise SystemExit(f"{path} is not {args.template} at {args.train_steps} steps")
    taken = []
    for session in data["sessions"]:
        if session["strategy"] in COMPARED and session["strategy"] not in args.strategies \
                and session["seed"] in args.seed_list:
            source = session.get("source", "this benchmark")
            if source == "this benchmark":  # measured by the earlier run that wrote the file (its commit kept)
                source = f"benchmarks/results/{path.name}"
            taken.append({**session, "train_steps": session.get("train_steps", session.get("train_steps_spent")),
                          "winner_edited": False, "edited_stages": 0, "source": source})
    return taken


def with_prompt_sizes(results: list[dict], args: argparse.Namespace) -> list[dict]:
    for result in results:
        folder = args.work / "relay" / f"{result['strategy']}-{result['seed']}"
        if result["strategy"] in LLM_STRATEGIES and folder.is_dir():
            result["prompt_chars"] = relay_prompt_chars(folder)
    return results


def run_all(args: argparse.Namespace) -> list[dict]:
    log = args.work / "results.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    done = [r for r in done if r["strategy"] in args.strategies and r["seed"] in args.seed_list]
    taken = baselines_from(args.baselines_from, args) if args.baselines_from else []
    have = {(r["strategy"], r["seed"]) for r in done}
    jobs = [(s, seed) for seed in args.seed_list for s in args.strategies if (s, seed) not in have]
    if args.report_only:
        jobs = []

    def run_and_record(job):
        try:
            result = run_one(*job, args)
            result["edit_ablation"] = ablate(result, args)
        except Exception as exc:  # one broken session is reported, not the end of the benchmark
            print(f"{job[0]} seed {job[1]} FAILED: {exc}", flush=True)
            with (args.work / "failures.jsonl").open("a") as handle:
                handle.write(json.dumps({"strategy": job[0], "seed": job[1], "error": str(exc)[-3000:]}) + "\n")
            return None
        with log.open("a") as handle:
            handle.write(json.dumps(result) + "\n")
        print(f"{result['session']}: test {result['best_test']:.3f}, {result['wall_seconds'] / 60:.1f} min", flush=True)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done += [r for r in pool.map(run_and_record, jobs) if r is not None]
    return done + taken


def summary(results: list[dict], strategies: list[str]) -> dict:
    table = {}
    for strategy in strategies:
        runs = [r for r in results if r["strategy"] == strategy]
        if not runs:
            continue
        tests = [r["best_test"] for r in runs]
        table[strategy] = {"seeds": len(runs), "test_median": statistics.median(tests), "test_min": min(tests),
                           "test_max": max(tests), "winners_edited": sum(r.get("winner_edited", False) for r in runs)}
        if strategy in LLM_STRATEGIES:
            for key in ("requests", "repairs", "tokens", "prompt_chars"):
                table[strategy][f"{key}_median"] = statistics.median(r.get(key, 0) for r in runs)
    return table


def margin(table: dict) -> dict | None:
    """The better LLM strategy's median minus the best baseline's, in points."""
    llm = [s for s in LLM_STRATEGIES if s in table]
    base = [s for s in BASELINES if s in table]
    if not llm or not base:
        return None
    best_llm = max(llm, key=lambda s: table[s]["test_median"])
    best_base = max(base, key=lambda s: table[s]["test_median"])
    points = 100 * (table[best_llm]["test_median"] - table[best_base]["test_median"])
    control = {f"{name}_points": 100 * (table[best_llm]["test_median"] - table[name]["test_median"])
               for name in CONTROLS if name in table}  # against no search at all, beside the searches
    return {"llm_strategy": best_llm, "baseline": best_base, "points": points,
            "seeds": min(table[best_llm]["seeds"], table[best_base]["seeds"]), "target_points": MARGIN_POINTS,
            "met": points >= MARGIN_POINTS and min(table[best_llm]["seeds"], table[best_base]["seeds"]) >= 3,
            **control}


def report(results: list[dict], args: argparse.Namespace) -> tuple[str, dict]:
    table = summary(results, [*LLM_STRATEGIES, *COMPARED])  # what ran here and what was taken from a file
    rows = ["| strategy | seeds | test median [min, max] | winners with an edit | requests / repairs / prompt "
            "characters (median) |", "|---|---|---|---|---|"]
    for strategy, entry in table.items():
        usage = (f"{entry['requests_median']:g} / {entry['repairs_median']:g} / {entry['prompt_chars_median']:,.0f}"
                 if strategy in LLM_STRATEGIES else "—")
        rows.append(f"| {strategy} | {entry['seeds']} | {entry['test_median']:.3f} [{entry['test_min']:.3f}, "
                    f"{entry['test_max']:.3f}] | {entry['winners_edited']} | {usage} |")
    paired = {}
    rows += ["", "Paired by search seed (test accuracy, points; exact sign-flip test):", "",
             "| LLM strategy | baseline | mean difference | wins / losses | p |", "|---|---|---|---|---|"]
    for strategy in (s for s in LLM_STRATEGIES if s in table):
        for baseline in (b for b in COMPARED if b in table):
            test = paired_test(results, strategy, baseline)
            if test:
                paired[f"{strategy}-{baseline}"] = test
                rows.append(f"| {strategy} | {baseline} | {100 * test['mean_difference']:+.1f} | {test['wins']} / "
                            f"{test['losses']} (of {test['n']}) | {test['p_value']:.3f} |")
    rows += ["", "Every session (seed: test ± stderr; winner's path; source):", ""]
    for r in sorted(results, key=lambda r: (r["strategy"], r["seed"])):
        ablation = r.get("edit_ablation")
        note = (f"; without its edits {ablation['replay_test']:.3f} ({100 * ablation['delta']:+.1f} ± "
                f"{100 * ablation['stderr']:.1f} points paired, stage sd {ablation['stage_sd']:.3f}: "
                f"{ablation['verdict']})" if ablation else "")
        rows.append(f"- {r['strategy']} {r['seed']}: {r['best_test']:.3f} ± {r['best_test_stderr']:.3f}; "
                    f"{' › '.join(r['best_path']) or 'base'}{' (edited)' if r.get('winner_edited') else ''}; "
                    f"{r.get('train_steps')} steps; {r.get('source', '')}"
                    + (f", code {r['commit']}" if r.get("commit") else "") + note)
    worth = pooled_edit_worth(results)
    if worth:
        rows += ["", f"Edits' worth over every edited winner (winner minus its replay without the edits, paired "
                     f"by session): {100 * worth['mean_difference']:+.1f} points on average, {worth['wins']} "
                     f"gains / {worth['losses']} losses of {worth['n']}, sign-flip p = {worth['p_value']:.3f}."]
    result = margin(table)
    if result:
        rows += ["", f"Margin: {result['llm_strategy']}'s median minus {result['baseline']}'s (the best baseline): "
                     f"{result['points']:+.1f} points over {result['seeds']} seeds (target ≥ {MARGIN_POINTS:g} "
                     f"over ≥ 3 seeds: {'met' if result['met'] else 'not met'})."]
        rows += [f"Against `{name}` (no search: the space's default stage down one path for the whole budget): "
                 f"{result[f'{name}_points']:+.1f} points." for name in CONTROLS if f"{name}_points" in result]
    rows += ["", f"Budget {args.train_steps} GRPO steps per session, template `{args.template}`, search seeds "
                 f"{args.seed_list[0]}–{args.seed_list[-1]}; the LLM was {ANSWERED_BY}. The relay reports no token "
                 "counts: prompt characters are counted from its requests (about 4 characters a token). Prompt bound: "
                 f"{args.llm_prompt_tokens or 'autorl default'} tokens (`--llm-prompt-tokens`)."]
    return "\n".join(rows) + "\n", {"summary": table, "paired": paired, "margin": result, "edit_worth": worth}


def pooled_edit_worth(results: list[dict]) -> dict | None:
    """The edits' worth across sessions: one session's replay is within seed noise, several
    of the same sign are not."""
    deltas = [r["edit_ablation"]["delta"] for r in results if r.get("edit_ablation")]
    return sign_flip_test(deltas) if len(deltas) >= 2 else None


def main(argv=None) -> int:
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = with_prompt_sizes(run_all(args), args)
    text, numbers = report(results, args)
    if not args.report_only:
        text += f"Benchmark wall time (this invocation): {(time.monotonic() - started) / 60:.1f} min.\n"
    stem = f"llm_search-{args.template}" + (f"-{args.suffix}" if args.suffix else "")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(f"# LLM strategies against the hyperparameter searches\n\n{text}")
    (args.out / f"{stem}.json").write_text(json.dumps({
        "template": args.template, "train_steps": args.train_steps, "seeds": args.seed_list,
        "answered_by": ANSWERED_BY, "memory": False,  # search_efficiency.run_session passes --memory off
        "brief_search_results": args.brief_search_results, "llm_prompt_tokens": args.llm_prompt_tokens or "default",
        **numbers, "sessions": results}, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
