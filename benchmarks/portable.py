"""A session lives in MLflow: resume anywhere, checkpoints in the artifact store, a disk that does not fill.

Four measurements, each in fresh temporary folders:

- kills: a `--train-steps 60` default session against `autorl server` (PostgreSQL and an
  MLflow server with its own artifact root), left alone; then the same session
  SIGKILLed at K random moments, each time its whole runs folder deleted and the session
  resumed into a new, empty one (`autorl research` again with the same name when the kill
  came before the session existed). The resumed tree must equal the one left alone.
- disk: one `--stages 40` default session with the default retention and one with
  `--keep-checkpoints all`, side by side; the peak size of each runs folder (polled).
- checkpoint: a checkpoint of over 1 GB (random weights) saved to the server's artifact
  store by one process and fetched into an empty cache by another (what a stage on a
  node that shares no disk does); the peak RSS of each above its RSS before the move.
- model: a short `wordproblems` session (SmolLM2-135M-Instruct) with `--register`; the
  registered winner loaded back with `mlflow.transformers.load_model` and asked a question.

    .venv/bin/python benchmarks/portable.py [--kills 8] [--seed 0] [--skip model]

Writes benchmarks/results/portable.json and portable.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AUTORL = [sys.executable, "-m", "autorl"]
RESULTS = REPO / "benchmarks" / "results"
PARTS = ("kills", "disk", "checkpoint", "model")


def cli(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTORL, *args], capture_output=True, text=True, cwd=REPO, timeout=timeout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tree(store: list[str], name: str, runs: Path) -> list | None:
    done = cli("show", name, "--json", "--runs-dir", str(runs), *store)
    if done.returncode != 0:
        return None
    return [(n["id"], n["parent"], n["status"], n["val_score"], json.dumps(n["hyperparameters"], sort_keys=True))
            for n in json.loads(done.stdout)["nodes"]]


# -- kills ---------------------------------------------------------------------------------------

def session_args(name: str, runs: Path, store: list[str], steps: int) -> list[str]:
    return ["research", "does a session resume from MLflow alone", "--train-steps", str(steps), "--seed", "0",
            "--memory", "off",  # the killed sessions must not read the whole one as an earlier session
            "--name", name, "--runs-dir", str(runs), *store]


def killed_and_moved(name: str, tmp: Path, store: list[str], steps: int, moment: float, reference: list) -> dict:
    first, second = tmp / f"{name}-a", tmp / f"{name}-b"
    process = subprocess.Popen([*AUTORL, *session_args(name, first, store, steps)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    try:
        process.wait(timeout=moment)
        killed, ended = False, time.monotonic() - started
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed, ended = True, None
    shutil.rmtree(first)
    recovered, how = cli("resume", name, "--runs-dir", str(second), *store), "resume"
    if recovered.returncode == 1 and "no session named" in recovered.stderr:
        recovered, how = cli(*session_args(name, second, store, steps)), "research again"
    got = tree(store, name, second)
    return {"moment_s": moment, "killed": killed, "ended_s": ended, "recovered_by": how, "exit": recovered.returncode,
            "rebuilt": "rebuilt the session folder from MLflow" in recovered.stdout,
            "identical": got == reference, "nodes": len(got or []),
            "error": "" if recovered.returncode == 0 else (recovered.stderr.strip().splitlines() or [""])[-1]}


def measure_kills(args, tmp: Path, store: list[str]) -> dict:
    started = time.monotonic()
    whole = cli(*session_args("whole", tmp / "whole", store, args.train_steps))
    seconds = time.monotonic() - started
    if whole.returncode != 0:
        raise SystemExit(f"the session left alone failed: {whole.stderr[-2000:]}")
    reference = tree(store, "whole", tmp / "whole")
    rng = random.Random(args.seed)
    kills, horizon = [], seconds
    while sum(k["killed"] for k in kills) < args.kills and len(kills) < 3 * args.kills:
        moment = round(rng.uniform(0.5, 0.95 * horizon), 1)
        kills.append(killed_and_moved(f"k{len(kills)}", tmp, store, args.train_steps, moment, reference))
        if not kills[-1]["killed"]:  # it ended first: draw later moments inside the time a session takes now
            horizon = min(horizon, kills[-1]["ended_s"])
        print(json.dumps(kills[-1]), flush=True)
    return {"reference_seconds": round(seconds, 1), "reference_nodes": len(reference), "kills": kills}


# -- disk ----------------------------------------------------------------------------------------

def folder_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass  # removed while walking
    return total


def peak_while(process: subprocess.Popen, folder: Path) -> int:
    peak = 0
    while process.poll() is None:
        peak = max(peak, folder_bytes(folder))
        time.sleep(0.5)
    return max(peak, folder_bytes(folder))


def measure_disk(args, tmp: Path) -> dict:
    runs = {mode: tmp / f"disk-{mode}" for mode in ("frontier", "all")}
    processes = {mode: subprocess.Popen([*AUTORL, "research", "how much disk does a session need",
                                         "--stages", str(args.stages), "--seed", "0", "--name", "s",
                                         "--keep-checkpoints", mode, "--runs-dir", str(folder)], cwd=REPO,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for mode, folder in runs.items()}
    peaks: dict[str, int] = {}
    threads = [threading.Thread(target=lambda m=mode: peaks.__setitem__(m, peak_while(processes[m], runs[m])))
               for mode in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for mode, process in processes.items():
        if process.returncode != 0:
            raise SystemExit(f"the {mode} session failed: {process.stderr.read()[-2000:]}")
    trees = {mode: tree([], "s", folder) for mode, folder in runs.items()}
    return {"stages": args.stages, "peak_mb": {m: round(b / 2**20, 1) for m, b in peaks.items()},
            "disk_ratio": round(peaks["frontier"] / peaks["all"], 3), "same_tree": trees["frontier"] == trees["all"],
            "final_mb": {m: round(folder_bytes(f) / 2**20, 1) for m, f in runs.items()}}


# -- checkpoint ----------------------------------------------------------------------------------

MOVE = r'''
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from autorl.storage.tracking import Tracker

def status_mb(key):  # VmRSS (now) or VmHWM (peak since the mark was reset)
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) / 1024

action, uri, run_id, folder = sys.argv[2:6]
store = Tracker(uri).checkpoints
store.repository(run_id)  # everything imported and connected: the idle point
idle = status_mb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # the peak from here on (imports before it do not count)
started = time.monotonic()
if action == "save":
    store.save(run_id, Path(folder))
else:
    store.fetch(run_id, Path(folder))
print(json.dumps({"seconds": time.monotonic() - started, "idle_mb": idle, "peak_mb": status_mb("VmHWM")}))
'''


def fake_checkpoint(folder: Path, megabytes: int) -> None:
    """A checkpoint's shape (config, tokenizer, one safetensors file) with random weights."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "tokenizer.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "U8", "shape": [megabytes * 2**20], "data_offsets": [0, megabytes * 2**20]}})
    with (folder / "model.safetensors").open("wb") as handle:
        handle.write(len(header).to_bytes(8, "little") + header.encode())
        for _ in range(megabytes):
            handle.write(os.urandom(2**20))


def move(action: str, uri: str, run_id: str, folder: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", MOVE, str(REPO), action, uri, run_id, str(folder)],
                          capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{action} failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["rss_mb_over_idle"] = round(result["peak_mb"] - result["idle_mb"], 1)
    return result


def measure_checkpoint(args, tmp: Path, uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    folder = tmp / "big" / "checkpoint"
    fake_checkpoint(folder, args.checkpoint_mb)
    size = folder_bytes(folder) / 2**20
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("autorl").experiment_id
    run_id = client.create_run(experiment, run_name="checkpoint move").info.run_id
    saved = move("save", uri, run_id, folder)
    fetched = move("fetch", uri, run_id, tmp / "cache" / "checkpoint")
    whole = folder_bytes(tmp / "cache" / "checkpoint") / 2**20
    client.delete_run(run_id)
    return {"checkpoint_mb": round(size, 1), "fetched_mb": round(whole, 1), "save": saved, "fetch": fetched,
            "rss_mb_over_idle": max(saved["rss_mb_over_idle"], fetched["rss_mb_over_idle"])}


# -- model ---------------------------------------------------------------------------------------

LOAD = r'''
import json, sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
generate = mlflow.transformers.load_model(sys.argv[2])
reply = generate([{"role": "user", "content": "Tom has 3 apples and buys 4 more. How many apples does he have?"}],
                 max_new_tokens=32, do_sample=False)
print(json.dumps({"reply": reply[0]["generated_text"][-1]["content"]}))
'''


def measure_model(args, tmp: Path) -> dict:
    runs = tmp / "model"
    started = time.monotonic()
    done = cli("research", "which stage helps word problems", "--template", "wordproblems", "--train-steps",
               str(args.model_steps), "--register", "wordproblems-winner", "--name", "s", "--runs-dir", str(runs))
    seconds = time.monotonic() - started
    registered = "models:/wordproblems-winner/1"
    loaded = subprocess.run([sys.executable, "-c", LOAD, f"sqlite:///{runs / 'mlflow.db'}", registered],
                            capture_output=True, text=True, cwd=REPO)
    reply = json.loads(loaded.stdout.strip().splitlines()[-1])["reply"] if loaded.returncode == 0 else None
    return {"session_exit": done.returncode, "session_seconds": round(seconds, 1),
            "registered": registered if registered in done.stdout else None,
            "registered_model_loads": loaded.returncode == 0 and bool(reply), "reply": reply,
            "error": "" if loaded.returncode == 0 else loaded.stderr.strip().splitlines()[-1:]}


# -- report --------------------------------------------------------------------------------------

def report(result: dict) -> str:
    lines = ["# A session lives in MLflow", "",
             f"`benchmarks/portable.py`, {result['machine']}.", ""]
    if kills := result.get("kills_detail"):
        rows = "\n".join(f"| {k['moment_s']:.1f} | {'yes' if k['killed'] else 'no (it had ended)'} | "
                         f"{k['recovered_by']} | {k['exit']} | {'yes' if k['rebuilt'] else 'no'} | "
                         f"{'yes' if k['identical'] else 'no'} |" for k in kills["kills"])
        lines += ["## Resume from the server alone", "",
                  f"The default session (`--train-steps {result['train_steps']}`, seed 0) against `autorl server` "
                  f"took {kills['reference_seconds']:.0f} s left alone ({kills['reference_nodes']} stages). "
                  f"Killed at {result['kills']} random moments ({len(kills['kills']) - result['kills']} more drawn "
                  "after the session had already ended: not counted), its whole runs folder deleted each time and "
                  f"resumed into an empty one: **{result['identical']} of {result['kills']}** trees identical to "
                  "the uninterrupted one (nodes, parents, statuses, validation scores, values).", "",
                  "| killed at (s) | killed | recovered by | exit | folder rebuilt | identical |",
                  "| --- | --- | --- | --- | --- | --- |", rows, ""]
    if disk := result.get("disk"):
        lines += ["## Disk", "",
                  f"One `--stages {disk['stages']}` default session, peak size of its runs folder: "
                  f"{disk['peak_mb']['frontier']} MB with the default retention, {disk['peak_mb']['all']} MB with "
                  f"`--keep-checkpoints all`: **disk_ratio {disk['disk_ratio']}** (at the end "
                  f"{disk['final_mb']['frontier']} MB against {disk['final_mb']['all']} MB). Same tree either way: "
                  f"{'yes' if disk['same_tree'] else 'no'}.", ""]
    if move := result.get("checkpoint"):
        lines += ["## A large checkpoint through the store", "",
                  f"A {move['checkpoint_mb']:.0f} MB checkpoint saved to the server's artifact store by one process "
                  f"({move['save']['seconds']:.1f} s, peak RSS {move['save']['rss_mb_over_idle']} MB above idle) "
                  f"and fetched into an empty cache by another ({move['fetch']['seconds']:.1f} s, "
                  f"{move['fetch']['rss_mb_over_idle']} MB above idle; {move['fetched_mb']:.0f} MB arrived): "
                  f"the controller's side peaks at {move['rss_mb_over_idle']} MB above idle.", ""]
        if worker := move.get("ray_worker"):
            lines += [f"On a Ray cluster (`benchmarks/results/cluster.json`), a job on node `{worker['job_node']}` "
                      f"fetched a {worker['megabytes']:.0f} MB checkpoint from the store ({worker['fetch_seconds']} s, "
                      f"{worker['fetch_rss_mb_over_idle']} MB above idle) and sent it back "
                      f"({worker['send_seconds']} s, {worker['send_rss_mb_over_idle']} MB above idle).", ""]
        lines += [f"Peak RSS above idle, controller and Ray worker: **rss_mb_over_idle {result['rss_mb_over_idle']}**.",
                  ""]
    if model := result.get("model"):
        lines += ["## The winner as a registered model", "",
                  f"A `wordproblems` session (SmolLM2-135M-Instruct, `--train-steps {result['model_steps']}`, "
                  f"{model['session_seconds']:.0f} s) registered its winner as `{model['registered']}`; "
                  f"`mlflow.transformers.load_model` loaded it back and it answered: {model['reply']!r} "
                  f"(**registered_model_loads: {str(model['registered_model_loads']).lower()}**).", ""]
    return "\n".join(lines)


def save(result: dict, out: Path) -> None:
    """Write what is measured so far (each part as it ends: a long run cut short keeps them)."""
    out.write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(report(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--stages", type=int, default=40)
    parser.add_argument("--checkpoint-mb", type=int, default=1100)
    parser.add_argument("--model-steps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments")
    parser.add_argument("--skip", action="append", default=[], choices=PARTS)
    parser.add_argument("--out", type=Path, default=RESULTS / "portable.json")
    args = parser.parse_args()
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result = {**previous, "machine": f"{os.cpu_count()} CPUs, measured {time.strftime('%Y-%m-%d')}",
              "train_steps": args.train_steps, "model_steps": args.model_steps}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        tmp.chmod(0o755)  # the postgres user must reach its data folder
        if {"kills", "checkpoint"} - set(args.skip):
            measure_on_server(args, tmp, result)
        if "disk" not in args.skip:
            result["disk"] = measure_disk(args, tmp)
            result["disk_ratio"] = result["disk"]["disk_ratio"]
            save(result, args.out)
        if "model" not in args.skip:
            result["model"] = measure_model(args, tmp)
            result["registered_model_loads"] = result["model"]["registered_model_loads"]
            save(result, args.out)
    add_ray_worker(result)
    save(result, args.out)
    print(args.out.with_suffix(".md").read_text())
    return 0


def add_ray_worker(result: dict) -> None:
    """The Ray side of the same move, as benchmarks/cluster.py measured it (a job on a worker
    node fetching and sending a checkpoint of the same size through the session's store)."""
    cluster = RESULTS / "cluster.json"
    moved = json.loads(cluster.read_text()).get("checkpoint_move") if cluster.is_file() else None
    if not moved or "checkpoint" not in result:
        return
    worker = max(moved["fetch_rss_mb_over_idle"], moved["send_rss_mb_over_idle"])
    result["checkpoint"]["ray_worker"] = {**moved, "rss_mb_over_idle": worker, "from": "cluster.json"}
    result["rss_mb_over_idle"] = max(result["checkpoint"]["rss_mb_over_idle"], worker)


def measure_on_server(args, tmp: Path, result: dict) -> None:
    """The parts that need `autorl server`: kills, and the large checkpoint."""
    server, port = tmp / "server", free_port()
    up = cli("server", "up", "--dir", str(server), "--port", str(port), "--pg-port", str(free_port()))
    if up.returncode != 0:
        raise SystemExit(f"autorl server up failed: {up.stderr}")
    uri = f"http://127.0.0.1:{port}"
    try:
        if "kills" not in args.skip:
            result["kills_detail"] = measure_kills(args, tmp, ["--tracking-uri", uri])
            kills = result["kills_detail"]["kills"]
            killed = [k for k in kills if k["killed"]]  # a session that ended before its moment was not a kill
            result.update(kills=len(killed), identical=sum(k["identical"] for k in killed), folder_deleted=True)
            save(result, args.out)
        if "checkpoint" not in args.skip:
            result["checkpoint"] = measure_checkpoint(args, tmp, uri)
            result.update(checkpoint_mb=result["checkpoint"]["checkpoint_mb"],
                          rss_mb_over_idle=result["checkpoint"]["rss_mb_over_idle"])
            save(result, args.out)
    finally:
        cli("server", "down", "--dir", str(server))


if __name__ == "__main__":
    raise SystemExit(main())
