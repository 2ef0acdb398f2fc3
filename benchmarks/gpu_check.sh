#!/usr/bin/env bash
# A 2-stage countdown session on the GPU, inside the sandbox, measured: steps/s, GPU
# memory, GPU busy share and the scores, written to benchmarks/results/gpu_check.md.
# Sized for one H200 in under 8 minutes. Works offline: on a machine whose Python has
# torch and transformers, it installs the rest from wheels it is handed (--wheels DIR;
# build that folder on a networked machine with `pip download -d DIR trl==1.16.0 mlflow==3.17.2 ...`).
# Without vLLM it generates with Hugging Face `generate` and says so.
#
#   benchmarks/gpu_check.sh --model /models/Qwen2.5-0.5B-Instruct [--wheels DIR] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="" WHEELS="" OUT="benchmarks/results/gpu_check.md" WORK="$(mktemp -d)"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;; --wheels) WHEELS="$2"; shift 2 ;; --out) OUT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$MODEL" ] || { echo "--model FOLDER (safetensors, a chat template) is required" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs a GPU" >&2; exit 1; }

PY="${PYTHON:-python3}"
if ! "$PY" -c "import autorl, trl, mlflow, optuna" 2>/dev/null; then
  "$PY" -m venv --system-site-packages "$WORK/venv"   # keeps the machine's torch and transformers
  PY="$WORK/venv/bin/python"
  if [ -n "$WHEELS" ]; then
    "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -e .
  else
    "$PY" -m pip install --quiet -e .
  fi
fi
AUTORL=("$PY" -m autorl)
VLLM=$("$PY" -c "import importlib.util; print('yes' if importlib.util.find_spec('vllm') else 'no')")
[ "$VLLM" = yes ] || echo "vLLM is not installed: rollouts and evaluation use Hugging Face generate"

"${AUTORL[@]}" init "$WORK/tpl" --template countdown --base-model "$MODEL"
"$PY" - "$WORK/tpl" <<'PYEOF'
import re, sys
from pathlib import Path
root = Path(sys.argv[1])
constants = root / "env" / "constants.toml"
constants.chmod(0o644)
text = constants.read_text()
for key, value in {"validation_size": 200, "test_size": 200, "train_size": 2048, "wall_seconds": 240}.items():
    text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
constants.write_text(text)
space = root / "space.toml"
space.write_text(re.sub(r"(\[max_steps\]\ntype = \"categorical\"\n)choices = .*\ndefault = .*",
                        r"\1choices = [15]\ndefault = 15", space.read_text()))
PYEOF

nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$WORK/smi.csv" &
SMI=$!
started=$(date +%s)
"${AUTORL[@]}" research "gpu check" --template "$WORK/tpl" --stages 2 --gpus auto --strategy random \
  --name gpu-check --runs-dir "$WORK/runs" | tail -20
wall=$(( $(date +%s) - started ))
kill "$SMI" 2>/dev/null || true

"$PY" - "$WORK" "$OUT" "$wall" "$VLLM" <<'PYEOF'
import json, subprocess, sys
from pathlib import Path
work, out, wall, vllm = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
show = json.loads(subprocess.run([sys.executable, "-m", "autorl", "show", "gpu-check", "--json", "--runs-dir",
                                  str(work / "runs")], capture_output=True, text=True, check=True).stdout)
samples = [line.split(",") for line in (work / "smi.csv").read_text().splitlines() if line.count(",") == 1]
busy = [float(u) for u, _ in samples]
memory = [float(m) for _, m in samples]
rows = []
for node in show["nodes"]:
    records = [json.loads(l) for l in (work / "runs" / "sessions" / "gpu-check" / "nodes" / node["id"] / "metrics.jsonl")
               .read_text().splitlines() if l.strip()]
    times = [r["step_time"] for r in records if "step_time" in r]
    footer = (work / "runs" / "sessions" / "gpu-check" / "nodes" / node["id"] / "stdout.log").read_text()
    steps_per_s = len(times) / sum(times) if times else float("nan")
    rows.append(f"| {node['id']} | {node['status']} | {node['val_score']} ± {node['val_stderr']} | {node['steps']} "
                f"| {steps_per_s:.2f} | {'device: cuda' in footer} | {'generation: vllm' in footer} |")
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("\n".join([
    "# GPU check: a 2-stage countdown session on the GPU, in the sandbox", "",
    f"GPU: {gpu.strip()}; vLLM installed: {vllm}; session wall: {wall} s; status: {show['status']}", "",
    f"GPU busy share (nvidia-smi, every 0.5 s): mean {sum(busy) / max(len(busy), 1):.0f}%; "
    f"peak memory {max(memory, default=0) / 1024:.1f} GiB", "",
    f"base validation: {show['base_score']}", "",
    "| node | status | validation | steps | steps/s | on CUDA | vLLM rollouts |", "| --- | --- | --- | --- | --- | --- | --- |",
    *rows, ""]))
print(out.read_text())
PYEOF
