"""Write benchmarks/results/gpu_check.md from a finished (or failed) gpu_check.sh session:
the machine, whether trials saw the GPU inside the sandbox, the session's status and wall
time, GPU busy share and memory (nvidia-smi every 0.5 s), and per node its
hyperparameters, scores, steps/s, device and generation engine. Run by
benchmarks/gpu_check.sh; reads only its work folder."""

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

SHOWN_HYPERPARAMETERS = ("num_generations", "max_completion_length", "lora_rank", "beta", "learning_rate", "loss_type")


def read_json(path: Path):
    try:
        text = path.read_text()
        return json.loads(text[text.index("{"):])
    except (OSError, ValueError):
        return None


def footer(text: str) -> dict[str, str]:
    if "\n---\n" not in "\n" + text:
        return {}
    tail = ("\n" + text).rsplit("\n---\n", 1)[1]
    return dict(line.split(": ", 1) for line in tail.splitlines() if ": " in line)


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def said(facts: dict) -> str:
    """One probe answer in words."""
    if not facts:
        return "not probed"
    if "cuda" not in facts:
        return f"failed ({facts.get('error', '-')})"
    return (f"{facts['cuda']} ({facts.get('name') or 'no device'}; /dev: {', '.join(facts.get('dev') or []) or '-'}; "
            f"libcuda: {', '.join(facts.get('libcuda') or []) or '-'})")


def node_row(node: dict, node_dir: Path) -> tuple[str, list[str]]:
    records = []
    metrics = node_dir / "metrics.jsonl"
    if metrics.is_file():
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    times = [r["step_time"] for r in records if "step_time" in r]
    stdout = (node_dir / "stdout.log").read_text(errors="replace") if (node_dir / "stdout.log").is_file() else ""
    stderr = (node_dir / "stderr.log").read_text(errors="replace") if (node_dir / "stderr.log").is_file() else ""
    foot = footer(stdout)
    evaluation = read_json(node_dir / "eval_validation.json") or {}
    hp = node.get("hyperparameters") or {}
    shown = ", ".join(f"{k} {hp[k]}" for k in SHOWN_HYPERPARAMETERS if k in hp)
    steps_per_s = len(times) / sum(times) if times and sum(times) > 0 else None
    rewards = [r["reward"] for r in records if "reward" in r]
    row = (f"| {node['id']} | {node['status']} | {shown} "
           f"| {fmt(node.get('val_score'))} ± {fmt(node.get('val_stderr'))} "
           f"| {node.get('steps', '-')} | {fmt(steps_per_s, 2)} | {foot.get('seconds', '-')} "
           f"| {fmt(rewards[0], 3) if rewards else '-'} → {fmt(rewards[-1], 3) if rewards else '-'} "
           f"| {foot.get('device', '-')} | {foot.get('generation', '-')} | {evaluation.get('engine', '-')} "
           f"| {fmt(node.get('peak_memory_mb'), 0)} |")
    notes = []
    if node["status"] != "succeeded":
        notes += [f"{node['id']}: {node.get('reason', '')}".strip()]
        notes += ["    " + line for line in stderr.strip().splitlines()[-15:]]
    return row, notes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wall", type=int, required=True)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--vllm", default="no")
    parser.add_argument("--model", default="")
    args = parser.parse_args()
    work = args.work
    runs = work / "runs"

    done = subprocess.run([sys.executable, "-m", "autorl", "show", "gpu-check", "--json", "--runs-dir", str(runs)],
                          capture_output=True, text=True)
    show = read_json_text(done.stdout) or {"status": f"no session record ({done.stderr.strip()[-300:]})", "nodes": []}
    samples = []
    if (work / "smi.csv").is_file():
        samples = [line.split(",") for line in (work / "smi.csv").read_text().splitlines() if line.count(",") == 1]
    busy = [float(u) for u, _ in samples]
    memory = [float(m) for _, m in samples]
    gpu = "none"
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip() or "none"
    except OSError:
        pass
    probe = read_json(work / "probe.json") or {}
    trial, cold, host = probe.get("trial") or {}, probe.get("trial_cold") or {}, probe.get("host") or {}
    doctor = (work / "doctor.txt").read_text(errors="replace") if (work / "doctor.txt").is_file() else ""
    sandbox_line = next((line for line in doctor.splitlines() if "sandbox:" in line), "")
    log = (work / "research.log").read_text(errors="replace") if (work / "research.log").is_file() else ""

    rows, notes = [], []
    for node in show.get("nodes", []):
        row, more = node_row(node, runs / "sessions" / "gpu-check" / "nodes" / node["id"])
        rows.append(row)
        notes += more
    busy_line = (f"mean {sum(busy) / len(busy):.0f}%, share of samples above 0%: "
                 f"{sum(u > 0 for u in busy) / len(busy):.0%} ({len(busy)} samples); "
                 f"peak memory used {max(memory) / 1024:.1f} GiB" if busy else "not sampled (no GPU)")
    lines = [
        "# GPU check: a countdown session on the GPU, in the sandbox", "",
        "Written by `benchmarks/gpu_check.sh` (this file is its output; the numbers are one run's).", "",
        f"- GPU: {gpu}",
        f"- model: {Path(args.model).name or '-'}; vLLM installed: {args.vllm}",
        f"- sandbox (doctor): {re.sub(r'^.*?sandbox: ', '', sandbox_line) or '-'}",
        f"- CUDA in a trial (benchmarks/gpu_sandbox_probe.py inside the sandbox, GPU {probe.get('gpu')}): "
        f"forked from a warm worker: {said(trial)}; started cold: {said(cold)}; outside the sandbox: {said(host)}",
        f"- session: status {show.get('status')}, exit code {args.exit_code}, wall {args.wall} s "
        f"(stages spent: {show.get('stages_spent', '-')})",
        f"- GPU busy share (nvidia-smi utilization every 0.5 s over the session): {busy_line}",
        f"- base validation score: {fmt(show.get('base_score'))} ± {fmt(show.get('base_stderr'))}; "
        f"best validation {fmt(show.get('best_val_score'))}, its test score {fmt(show.get('best_test_score'))} "
        f"(base test {fmt(show.get('base_test_score'))})",
        "",
        "| node | status | hyperparameters | validation | steps | steps/s | train s | reward first → last "
        "| device | generation | eval engine | peak host MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows, "",
    ]
    if notes:
        lines += ["## Failures", "", "```", *notes, "```", ""]
    if args.exit_code != 0 or not rows:
        lines += ["## The session's last lines", "", "```", *log.strip().splitlines()[-30:], "```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(args.out.read_text())


def read_json_text(text: str):
    try:
        return json.loads(text[text.index("{"):])
    except ValueError:
        return None


if __name__ == "__main__":
    main()
