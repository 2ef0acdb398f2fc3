"""Stages on a Ray cluster whose nodes share no folder: what a stage costs, what a lost node costs.

On this machine: a head and two worker nodes, each its own `ray start` with its own temp
and working folder, the workers started where the session's folder is empty
(tests/local_cluster.py). Three measurements, side by side in one run:

1. the same session (stand-in stages of 3 one-second steps) on the local executor and on
   the cluster: seconds per stage, and the cluster's overhead per stage;
2. a session whose node is killed mid-stage: stages per node, stages lost, steps
   recorded twice;
3. the channel: a checkpoint-sized blob through Ray's object store (the session's stash)
   and through an MLflow server's artifact store (`mlflow server --serve-artifacts` on
   loopback), up and back.

    .venv/bin/python benchmarks/cluster.py            # ~3 min on 2 cores

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
from conftest import make_template  # noqa: E402
from local_cluster import LocalCluster, free_port, release_held_stages  # noqa: E402

AUTORL = [sys.executable, "-m", "autorl"]
REPEATS = 3  # each transfer, timed as the median


def session(name: str, runs: Path, template: Path, stages: int, cluster: LocalCluster | None) -> subprocess.Popen:
    extra = ["--executor", "ray", "--ray-address", cluster.dashboard] if cluster else []
    env = {**os.environ, "AUTORL_RUNS_DIR": str(runs), **({"RAY_ADDRESS": cluster.gcs} if cluster else {})}
    return subprocess.Popen([*AUTORL, "research", "bench", "--template", str(template), "--stages", str(stages),
                             "--name", name, *extra], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


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


def overhead(work: Path, template: Path, cluster: LocalCluster, stages: int) -> dict:
    local_runs, ray_runs = work / "local", work / "ray"
    run_to_end(session("local", local_runs, template, stages, None), "the local session")
    run_to_end(session("onray", ray_runs, template, stages, cluster), "the cluster session")
    local, remote = stage_seconds(shown(local_runs, "local")), stage_seconds(shown(ray_runs, "onray"))
    return {"stages": stages, "seconds_per_stage_local": statistics.median(local),
            "seconds_per_stage_cluster": statistics.median(remote),
            "overhead_seconds_per_stage": statistics.median(remote) - statistics.median(local)}


def node_loss(work: Path, template: Path, cluster: LocalCluster, stages: int) -> dict:
    """Kill the node of the first stage once its first step is heard; release the rest."""
    from ray.job_submission import JobSubmissionClient

    runs = work / "lost"
    process = session("lost", runs, template, stages, cluster)
    events = runs / "sessions" / "lost" / "channel" / "events.jsonl"
    step = None
    while step is None:
        if process.poll() is not None:
            raise SystemExit(f"the session ended before a step: {process.communicate()[0][-2000:]}")
        lines = events.read_text().splitlines() if events.exists() else []
        step = next((json.loads(line) for line in lines if json.loads(line).get("kind") == "step"), None)
        time.sleep(0.1)
    client = JobSubmissionClient(cluster.dashboard)
    job = next(j for j in client.list_jobs() if j.submission_id and f"-{step['node']}-a1" in j.submission_id)
    killed = next(name for name, node in cluster.nodes().items() if node == job.driver_node_id)
    cluster.kill(killed)
    alive = [name for name in cluster.names if name != killed]
    while process.poll() is None:
        for name in alive:
            release_held_stages(cluster.root / name / "work")
        time.sleep(0.1)
    run_to_end(process, "the node-loss session")
    data = shown(runs, "lost")
    nodes = runs / "sessions" / "lost" / "nodes"
    per_node: dict[str, int] = {}
    for node in data["nodes"]:
        ray_node = node["worker"].split("on Ray node ")[-1].split(";")[0]
        name = next((n for n, i in cluster.nodes().items() if i.startswith(ray_node)), killed)
        per_node[name] = per_node.get(name, 0) + 1
    lost = [n["id"] for n in data["nodes"] if not (nodes / n["id"] / "checkpoint" / "config.json").is_file()
            or n["status"] != "succeeded"]
    steps = {n["id"]: [json.loads(line)["step"] for line in (nodes / n["id"] / "metrics.jsonl").open()]
             for n in data["nodes"]}
    duplicated = [node_id for node_id, got in steps.items() if len(got) != len(set(got))]
    return {"node_killed": killed, "killed_stage": step["node"], "stages_per_node": per_node, "lost": len(lost),
            "duplicated": len(duplicated), "retried": [n["id"] for n in data["nodes"] if "retried" in n["worker"]]}


def channel(sizes_mb: list[int], work: Path, cluster: LocalCluster) -> list[dict]:
    """Up and back, once per size, through the stash and through an MLflow artifact server."""
    import ray

    from autorl.stages import ray_files

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    ray.init(address=cluster.gcs, namespace=ray_files.NAMESPACE, log_to_driver=False)
    stash = ray_files.open_stash("channel-benchmark")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}", "--serve-artifacts",
                               "--artifacts-destination", str(work / "artifacts"), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 120
        while True:
            try:
                run_id = client.create_run(client.create_experiment("channel")).info.run_id
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        ray_files.put_blob(stash, "warm-up", b"x")  # the stash actor's start is not a transfer
        rows = []
        for size in sizes_mb:
            blob = os.urandom(size * 2**20)
            folder = work / f"blob{size}"
            folder.mkdir()
            (folder / "model.safetensors").write_bytes(blob)
            ray_times, mlflow_times = [], []
            for repeat in range(REPEATS):
                started = time.monotonic()
                ray_files.put_blob(stash, f"bench/{size}", blob)
                assert ray_files.get_blob(stash, f"bench/{size}") == blob
                ray_times.append(time.monotonic() - started)
                ray.get(stash.drop.remote("bench/"))
                started = time.monotonic()
                client.log_artifacts(run_id, str(folder), f"b{size}-{repeat}")
                back = client.download_artifacts(run_id, f"b{size}-{repeat}", str(work / f"back{size}-{repeat}"))
                assert (Path(back) / "model.safetensors").read_bytes() == blob
                mlflow_times.append(time.monotonic() - started)
            rows.append({"megabytes": size, "repeats": REPEATS,
                         "ray_object_store_seconds": statistics.median(ray_times),
                         "mlflow_artifacts_seconds": statistics.median(mlflow_times)})
            print(rows[-1], flush=True)
        return rows
    finally:
        server.terminate()
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=6)
    parser.add_argument("--sizes-mb", default="16,128")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="autorl-cluster-bench-"))
    slow = make_template(work / "slow", train_py="slow_copy_train.py", evaluate_py="fast_evaluate.py")
    held = make_template(work / "held", train_py="held_copy_train.py", evaluate_py="fast_evaluate.py")
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="autorl-cluster-")), workers=2, hidden=(work,)).start()
    try:
        cost = overhead(work, slow, cluster, args.stages)
        loss = node_loss(work, held, cluster, 4)
        transfers = channel([int(s) for s in args.sizes_mb.split(",")], work, cluster)
    finally:
        cluster.stop()
    result = {"nodes": 3, "worker_nodes": 2, "shared_filesystem": False, **cost, **loss, "channel": transfers,
              "seconds_per_stage": cost["seconds_per_stage_cluster"]}
    (args.out / "cluster.json").write_text(json.dumps(result, indent=2))
    rows = "\n".join(f"| {t['megabytes']} | {t['ray_object_store_seconds']:.2f} | {t['mlflow_artifacts_seconds']:.2f} |"
                     for t in transfers)
    text = (f"# Stages on a cluster that shares no folder\n\nA head (no CPUs) and 2 worker nodes of 1 CPU on this "
            f"machine, each its own `ray start` with its own temp and working folder; the workers run where the "
            f"session's folder is empty. Stand-in stages (3 steps of 1 s, a copied checkpoint).\n\n"
            f"- Seconds per stage (median of {cost['stages']}): local executor {cost['seconds_per_stage_local']:.1f}, "
            f"cluster {cost['seconds_per_stage_cluster']:.1f}: overhead {cost['overhead_seconds_per_stage']:+.1f} s "
            f"a stage (job submission, the job's Python and Ray start-up, inputs and outputs through the stash).\n"
            f"- Node lost mid-stage: {loss['node_killed']} killed during {loss['killed_stage']}; stages per node "
            f"{loss['stages_per_node']}; retried {loss['retried']}; lost {loss['lost']}, duplicated "
            f"{loss['duplicated']}.\n\nThe channel, a blob up and back (seconds, median of {REPEATS}; both ends on "
            f"this machine, so neither pays a network):\n\n| MB | Ray object store "
            f"(stash) | MLflow artifact server (HTTP) |\n|---|---|---|\n{rows}\n")
    (args.out / "cluster.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
