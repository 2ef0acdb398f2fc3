"""Stages on a Ray cluster whose nodes share no folder: what a stage costs, what a lost node costs.

On this machine: a head and two worker nodes, each its own `ray start` with its own temp
and working folder, the workers started where the session's folder is empty
(tests/local_cluster.py); the session's store an MLflow server on loopback that serves
its artifact root (the one place every node reaches). Three measurements, in one run:

1. the same session (stand-in stages of 3 one-second steps) on the local executor and on
   the cluster, both against the same server: seconds per stage, and the cluster's
   overhead per stage;
2. a `--parallel 2` session that finishes stages on both worker nodes, then loses the
   node of a running stage: stages per node before and after, stages lost, steps
   recorded twice;
3. a checkpoint-sized folder fetched from the artifact server and sent back by a Ray job
   on a worker node, with the code a stage's job uses (autorl/stages/job_files.py): the
   seconds each way and the job's peak RSS above its idle RSS.

    .venv/bin/python benchmarks/cluster.py            # ~5 min on 2 cores

Writes cluster.json and cluster.md to --out (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
from conftest import make_template  # noqa: E402
from local_cluster import LocalCluster, TrackingServer, release_held_stages  # noqa: E402
from portable import fake_checkpoint, folder_bytes  # noqa: E402

AUTORL = [sys.executable, "-m", "autorl"]


def session(name: str, runs: Path, template: Path, stages: int, store: str, cluster: LocalCluster | None,
            *extra: str) -> subprocess.Popen:
    extra = (*extra, "--executor", "ray", "--ray-address", cluster.dashboard) if cluster else extra
    env = {**os.environ, "AUTORL_RUNS_DIR": str(runs)}
    return subprocess.Popen([*AUTORL, "research", "bench", "--template", str(template), "--stages", str(stages),
                             "--name", name, "--tracking-uri", store, *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def shown(runs: Path, name: str) -> dict:
    done = subprocess.run([*AUTORL, "show", name, "--json"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "AUTORL_RUNS_DIR": str(runs)}, check=True)
    return json.loads(done.stdout)


def stage_seconds(data: dict) -> list[float]:
    """Each stage's wall time as the controller saw it: from its start to its end (UTC stamps)."""
    from datetime import datetime

    spans = []
    for node in data["nodes"]:
        if node["started_at"] and node["ended_at"]:
            start, end = (datetime.fromisoformat(node[k]) for k in ("started_at", "ended_at"))
            spans.append((end - start).total_seconds())
    return spans


def run_to_end(process: subprocess.Popen, what: str) -> None:
    out, _ = process.communicate(timeout=900)
    if process.returncode != 0:
        raise SystemExit(f"{what} failed:\n{out[-3000:]}")


def overhead(work: Path, template: Path, store: str, cluster: LocalCluster, stages: int) -> dict:
    local_runs, ray_runs = work / "local", work / "ray"
    run_to_end(session("local", local_runs, template, stages, store, None), "the local session")
    run_to_end(session("onray", ray_runs, template, stages, store, cluster), "the cluster session")
    local, remote = stage_seconds(shown(local_runs, "local")), stage_seconds(shown(ray_runs, "onray"))
    return {"stages": stages, "seconds_per_stage_local": statistics.median(local),
            "seconds_per_stage_cluster": statistics.median(remote),
            "overhead_seconds_per_stage": statistics.median(remote) - statistics.median(local)}


def jobs_of(cluster: LocalCluster, name: str) -> list:
    from ray.job_submission import JobSubmissionClient

    return [j for j in JobSubmissionClient(cluster.dashboard).list_jobs()
            if j.submission_id and j.submission_id.startswith(f"autorl-{name}-")]


def node_name(cluster: LocalCluster, node_id: str, names: dict[str, str]) -> str:
    names.update({i: n for n, i in cluster.nodes().items()})
    return names.get(node_id, node_id[:8])


def node_loss(work: Path, template: Path, store: str, cluster: LocalCluster, stages: int) -> dict:
    """Release held stages until stages have finished on both worker nodes; then kill the
    node of a running stage once its first step is heard, and release the rest."""
    runs, names = work / "lost", {}
    process = session("lost", runs, template, stages, store, cluster, "--parallel", "2")
    finished: dict[str, int] = {}
    while len(finished) < 2:
        if process.poll() is not None:
            raise SystemExit(f"the session ended before stages ran on two nodes: {process.communicate()[0][-2000:]}")
        for name in cluster.names:
            release_held_stages(cluster.root / name / "work")
        finished = {}
        for job in jobs_of(cluster, "lost"):
            if job.status.value == "SUCCEEDED":
                name = node_name(cluster, job.driver_node_id, names)
                finished[name] = finished.get(name, 0) + 1
        time.sleep(0.2)
    victim = None
    while victim is None:  # a stage that has logged a step on its node, not yet released
        running = [j for j in jobs_of(cluster, "lost") if j.status.value == "RUNNING" and j.driver_node_id]
        for job in running:
            name = node_name(cluster, job.driver_node_id, names)
            steps = (cluster.root / name / "work").rglob("metrics.jsonl")
            if any(not (m.parent / "release").exists() for m in steps):
                victim = (job, name)
                break
        time.sleep(0.1)
    job, killed = victim
    cluster.kill(killed)
    alive = [name for name in cluster.names if name != killed]
    while process.poll() is None:
        for name in alive:
            release_held_stages(cluster.root / name / "work")
        time.sleep(0.1)
    run_to_end(process, "the node-loss session")
    return loss_summary(shown(runs, "lost"), store, job.submission_id, killed, finished, names)


def loss_summary(data: dict, store: str, job: str, killed: str, before: dict, names: dict) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    per_node: dict[str, int] = {}
    for node in data["nodes"]:
        ray_node = node["worker"].split("on Ray node ")[-1].split(";")[0]
        name = next((n for i, n in names.items() if i.startswith(ray_node)), ray_node)
        per_node[name] = per_node.get(name, 0) + 1
    lost = [n["id"] for n in data["nodes"] if n["status"] != "succeeded"]
    duplicated = [n["id"] for n in data["nodes"]
                  if len(steps := [m.step for m in client.get_metric_history(n["mlflow_run_id"], "reward")])
                  != len(set(steps))]
    return {"node_killed": killed, "killed_job": job, "stages_per_node_before_kill": before,
            "stages_per_node": per_node, "lost": len(lost), "duplicated": len(duplicated),
            "retried": [n["id"] for n in data["nodes"] if "retried" in n["worker"]],
            "session_status": data["status"]}


MOVE = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from autorl.stages.job_files import RunFiles, download_uri

def status_mb(key):  # VmRSS (now) or VmHWM (peak since the mark was reset)
    line = next(l for l in open("/proc/self/status") if l.startswith(key + ":"))
    return int(line.split()[1]) / 1024

tracking, source, target, dest, report = sys.argv[2:7]
files = RunFiles(target, tracking)  # everything imported and connected: the idle point
idle = status_mb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
started = time.monotonic()
local = download_uri(source, __import__("pathlib").Path(dest), tracking)
fetched, fetch_peak = time.monotonic() - started, status_mb("VmHWM")
open("/proc/self/clear_refs", "w").write("5")
started = time.monotonic()
files.repository.log_artifacts(str(local), "checkpoint")
open(report, "w").write(json.dumps({"idle_mb": idle, "fetch_seconds": fetched, "fetch_peak_mb": fetch_peak,
                                    "send_seconds": time.monotonic() - started, "send_peak_mb": status_mb("VmHWM")}))
'''


def checkpoint_move(work: Path, store: str, cluster: LocalCluster, megabytes: int) -> dict:
    """A Ray job on a worker node fetches a checkpoint from the artifact server and sends it
    to another run, as a stage's job does with its parent's and its own."""
    from mlflow.tracking import MlflowClient
    from ray.job_submission import JobSubmissionClient

    folder = work / "big" / "checkpoint"
    fake_checkpoint(folder, megabytes)
    client = MlflowClient(store)
    experiment = client.create_experiment("checkpoint move")
    source, target = (client.create_run(experiment).info for _ in range(2))
    client.log_artifacts(source.run_id, str(folder), "checkpoint")
    script = cluster.root / "move.py"
    script.write_text(MOVE)
    jobs = JobSubmissionClient(cluster.dashboard)
    job = jobs.submit_job(entrypoint=" ".join([sys.executable, str(script), str(REPO), store,
                                              f"{source.artifact_uri}/checkpoint", target.artifact_uri,
                                              str(cluster.root / "moved"), str(cluster.root / "moved.json")]),
                          entrypoint_num_cpus=1, runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled"}})
    deadline = time.monotonic() + 900
    while jobs.get_job_status(job).value not in ("SUCCEEDED", "FAILED", "STOPPED"):
        if time.monotonic() > deadline:
            raise SystemExit("the checkpoint move did not end within 15 minutes")
        time.sleep(1)
    report = cluster.root / "moved.json"  # the job's node sees the cluster's folder, not the benchmark's
    if not report.is_file():
        info = jobs.get_job_info(job)
        raise SystemExit(f"the checkpoint move failed ({info.status.value}: {info.message}): "
                         f"{jobs.get_job_logs(job)[-2000:]}")
    moved = json.loads(report.read_text())
    sent = [a for a in client.list_artifacts(target.run_id, "checkpoint")]
    return {"megabytes": round(folder_bytes(folder) / 2**20, 1), "fetch_seconds": round(moved["fetch_seconds"], 1),
            "send_seconds": round(moved["send_seconds"], 1),
            "fetch_rss_mb_over_idle": round(moved["fetch_peak_mb"] - moved["idle_mb"], 1),
            "send_rss_mb_over_idle": round(moved["send_peak_mb"] - moved["idle_mb"], 1),
            "sent_whole": sorted(a.path for a in sent) == ["checkpoint/config.json", "checkpoint/model.safetensors",
                                                            "checkpoint/tokenizer.json"],
            "job_node": node_name(cluster, jobs.get_job_info(job).driver_node_id, {})}


PARTS = ("overhead", "loss", "move")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=6)
    parser.add_argument("--loss-stages", type=int, default=8)
    parser.add_argument("--checkpoint-mb", type=int, default=1100)
    parser.add_argument("--skip", action="append", default=[], choices=PARTS,
                        help="leave a part out (its numbers in cluster.json are kept)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autorl-cluster-bench-"))
    slow = make_template(work / "slow", train_py="slow_copy_train.py", evaluate_py="fast_evaluate.py")
    held = make_template(work / "held", train_py="held_copy_train.py", evaluate_py="fast_evaluate.py")
    root = Path(tempfile.mkdtemp(prefix="autorl-cluster-"))
    out = args.out / "cluster.json"
    result = {**(json.loads(out.read_text()) if args.skip and out.is_file() else {}),
              "nodes": 3, "worker_nodes": 2, "shared_filesystem": False, "store": "mlflow server on loopback",
              "loss_stages": args.loss_stages, "measured": time.strftime("%Y-%m-%d")}
    cluster = LocalCluster(root, workers=2, hidden=(work,)).start()
    server = TrackingServer(root / "store").start()
    try:
        if "overhead" not in args.skip:
            result.update(overhead(work, slow, server.uri, cluster, args.stages))
            result["seconds_per_stage"] = result["seconds_per_stage_cluster"]
            out.write_text(json.dumps(result, indent=2))
        if "loss" not in args.skip:
            result.update(node_loss(work, held, server.uri, cluster, args.loss_stages))
            out.write_text(json.dumps(result, indent=2))
        if "move" not in args.skip:
            result["checkpoint_move"] = checkpoint_move(work, server.uri, cluster, args.checkpoint_mb)
            out.write_text(json.dumps(result, indent=2))
    finally:
        server.stop()
        cluster.stop()
    cost, loss, move = result, result, result["checkpoint_move"]
    text = (f"# Stages on a cluster that shares no folder\n\nA head (no CPUs) and 2 worker nodes of 1 CPU on this "
            f"machine, each its own `ray start` with its own temp and working folder; the workers run where the "
            f"session's folder is empty. The session's store: an MLflow server on loopback serving its artifact "
            f"root, which every file of a stage goes through. Stand-in stages (3 steps of 1 s, a copied "
            f"checkpoint). Measured {result['measured']} (`cluster.json`).\n\n"
            f"- Seconds per stage (median of {cost['stages']}): local executor {cost['seconds_per_stage_local']:.1f}, "
            f"cluster {cost['seconds_per_stage_cluster']:.1f}: overhead {cost['overhead_seconds_per_stage']:+.1f} s "
            f"a stage (job submission, the job's Python start-up, its task, parent checkpoint, steps and results "
            f"through the artifact server).\n"
            f"- Node lost mid-stage (`--parallel 2`, {loss['loss_stages']} stages): stages finished per node before"
            f" the kill {loss['stages_per_node_before_kill']}; {loss['node_killed']} killed during "
            f"`{loss['killed_job']}`; "
            f"stages per node in the end {loss['stages_per_node']}; retried {loss['retried']}; lost {loss['lost']}, "
            f"steps recorded twice {loss['duplicated']}; session {loss['session_status']}.\n"
            f"- A {move['megabytes']} MB checkpoint through a Ray job on {move['job_node']}: fetched from the artifact "
            f"server in {move['fetch_seconds']} s at {move['fetch_rss_mb_over_idle']} MB of RSS above the job's idle, "
            f"sent to another run in {move['send_seconds']} s at {move['send_rss_mb_over_idle']} MB above idle; "
            f"arrived whole: {'yes' if move['sent_whole'] else 'no'}.\n")
    (args.out / "cluster.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
