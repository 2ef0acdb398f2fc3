"""Resume from any moment: a real session SIGKILLed at random moments, each resumed.

Runs one `--train-steps N` session of a template (default: the default template, real
TRL) left alone, then, in fresh runs directories, the same session killed at K moments
drawn uniformly over its wall time (start-up included). Each is recovered as a user
would: `autorl resume`, or `autorl research` again with the same name when the kill
came before the session existed. Recorded per kill: whether the recovery finished
without a traceback, the steps charged against the steps the nodes trained, whether
those lie in (N - smallest stage, N], whether the tree equals the uninterrupted one,
and whether a second resume changed nothing.

    .venv/bin/python benchmarks/resume_any.py [--template NAME] [--train-steps 60] [--kills 8] [--seed 0]

Writes benchmarks/results/resume_any.json and resume_any.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AUTORL = [sys.executable, "-m", "autorl"]
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO))
from autorl.config import DEFAULT_TEMPLATE  # noqa: E402


def cli(runs: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTORL, *args, "--runs-dir", str(runs)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "AUTORL_RUNS_DIR": str(runs)})


def shown(runs: Path) -> dict | None:
    done = cli(runs, "show", "s", "--json")
    return json.loads(done.stdout) if done.returncode == 0 else None


def tree(data: dict) -> list:
    return [(n["id"], n["parent"], n["status"], n["val_score"], json.dumps(n["hyperparameters"], sort_keys=True))
            for n in data["nodes"]]


def research_args(args) -> list[str]:
    return ["research", "does a killed session resume", "--template", args.template,
            "--train-steps", str(args.train_steps), "--seed", str(args.session_seed), "--name", "s"]


def killed_and_recovered(args, runs: Path, moment: float, reference: dict) -> dict:
    runs.mkdir(parents=True)
    process = subprocess.Popen([*AUTORL, *research_args(args), "--runs-dir", str(runs)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        process.wait(timeout=moment)
        was_killed = False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        was_killed = True
    existed = shown(runs) is not None
    recovered = cli(runs, "resume", "s")
    how = "resume"
    if recovered.returncode == 1 and ("no session named" in recovered.stderr or "being created" in recovered.stderr):
        recovered, how = cli(runs, *research_args(args)), "research again"
    data = shown(runs) or {"nodes": [], "status": None, "train_steps_spent": None}
    again = cli(runs, "resume", "s")
    trained = sum(n["steps"] for n in data["nodes"])
    return {
        "moment_s": moment, "killed": was_killed, "session_existed": existed, "recovered_by": how,
        "exit": recovered.returncode, "traceback": "Traceback" in recovered.stdout + recovered.stderr,
        "status": data["status"], "nodes": len(data["nodes"]),
        "terminal": all(n["status"] in ("succeeded", "failed") for n in data["nodes"]),
        "train_steps_spent": data["train_steps_spent"], "nodes_trained": trained,
        "steps_exact": data["train_steps_spent"] == trained,
        "steps_in_range": args.train_steps - args.smallest_stage < trained <= args.train_steps,
        "same_tree": bool(data["nodes"]) and tree(data) == reference["tree"],
        "second_resume_noop": again.returncode == 0 and "already finished" in again.stdout,
        "error": "" if recovered.returncode == 0 else recovered.stderr.strip().splitlines()[-1:],
    }


def report(result: dict) -> str:
    kills = result["kills"]
    ok = [k for k in kills if k["exit"] == 0 and k["status"] == "finished" and k["steps_exact"]
          and k["steps_in_range"] and k["second_resume_noop"] and not k["traceback"]]
    rows = "\n".join(
        f"| {k['moment_s']:.1f} | {'yes' if k['session_existed'] else 'no'} | {k['recovered_by']} | {k['exit']} | "
        f"{k['status']} | {k['train_steps_spent']} / {k['nodes_trained']} | {'yes' if k['same_tree'] else 'no'} | "
        f"{'yes' if k['second_resume_noop'] else 'no'} |" for k in kills)
    noop = "2nd resume no-op"
    ref, low = result["reference"], result["train_steps"] - result["smallest_stage"]
    return f"""# Resume from any moment

`benchmarks/resume_any.py`: the `{result['template']}` template, `--train-steps {result['train_steps']}`,
session seed {result['session_seed']}, kill moments drawn with seed {result['kill_seed']}; {result['machine']}.

The session left alone took {ref['seconds']:.0f} s, trained {ref['nodes_trained']} steps in {len(ref['tree'])} stages
and stopped with: "{ref['reason']}".

**{len(ok)} of {len(kills)}** killed sessions finished on recovery with no traceback, the steps charged
equal to the steps their nodes trained and within ({low}, {result['train_steps']}], and a second resume that
changed nothing; {sum(k['same_tree'] for k in kills)} of {len(kills)} ended with the
uninterrupted session's tree (same nodes, parents, statuses, validation scores and values).

| killed at (s) | session existed | recovered by | exit | status | steps charged / trained | same tree | {noop} |
| --- | --- | --- | --- | --- | --- | --- | --- |
{rows}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default=DEFAULT_TEMPLATE)
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--session-seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "resume_any.json")
    args = parser.parse_args()
    from autorl.stages import template as templates

    args.smallest_stage = templates.load(args.template).stage_step_choices()[0]
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "reference"
        runs.mkdir()
        started = time.monotonic()
        done = cli(runs, *research_args(args))
        seconds = time.monotonic() - started
        data = shown(runs)
        if done.returncode != 0 or data is None:
            print(done.stdout[-2000:], done.stderr[-2000:])
            return 1
        reference = {"seconds": round(seconds, 1), "tree": tree(data), "reason": data["reason"],
                     "nodes_trained": sum(n["steps"] for n in data["nodes"])}
        rng = random.Random(args.seed)
        moments = [round(rng.uniform(0.5, seconds), 1) for _ in range(args.kills)]
        kills = []
        for i, moment in enumerate(moments):
            kills.append(killed_and_recovered(args, Path(tmp) / f"kill{i}", moment, reference))
            print(json.dumps(kills[-1]), flush=True)
    result = {"template": args.template, "train_steps": args.train_steps, "smallest_stage": args.smallest_stage,
              "session_seed": args.session_seed, "kill_seed": args.seed,
              "machine": f"{os.cpu_count()} CPUs, measured {time.strftime('%Y-%m-%d')}",
              "reference": reference, "kills": kills}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
