#!/usr/bin/env bash
# A 2-stage countdown session on the GPU, inside the sandbox, measured: steps/s, GPU
# memory, GPU busy share and the scores, written to benchmarks/results/gpu_check.md.
# Sized for one H200 in a few minutes with a small model. Before the session it records
# `autorl doctor` and whether a trial's Python sees CUDA inside the sandbox
# (benchmarks/gpu_sandbox_probe.py). Without vLLM it generates with Hugging Face
# `generate` and says so.
#
#   benchmarks/gpu_check.sh --model FOLDER [--wheels DIR] [--site] [--out FILE] [--work DIR]
#                           [--stages N] [--steps N] [--problems N] [--gpus SPEC] [--time 6m] [--tiny]
#
# Python: $PYTHON (default python3). If it lacks autorl's packages:
#   - networked, a base interpreter: a venv with --system-site-packages (keeps the
#     machine's torch), then `pip install -e .` (the project's pins apply);
#   - --wheels DIR (offline): exactly the wheels in DIR, --no-deps, then autorl itself
#     (--no-deps, --no-build-isolation: DIR needs hatchling, editables, tomlkit and
#     trove-classifiers). Build DIR on a networked machine with
#     benchmarks/gpu_check_carry.sh, for the GPU machine's Python and packages;
#   - --site: into $PYTHON's own environment instead of a new venv. Needed when $PYTHON
#     is itself a venv (a venv made from it would not see its torch) — e.g. an image
#     whose torch lives in /opt/.../.venv. The sandbox shows a trial the interpreter's own
#     prefixes only, so the packages must live there, not in a layered venv.
# --time: the session's wall-clock budget (autorl research --time), so that a slow machine
# still ends with a report.
# --tiny: a CPU-sized smoke run of this script (1-2 steps, 16 problems, short answers);
# with --gpus none it runs on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
MODEL="" WHEELS="" SITE=0 OUT="benchmarks/results/gpu_check.md" WORK="" STAGES=2 STEPS=15 PROBLEMS=200 GPUS=auto TINY=0 TIME=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;; --wheels) WHEELS="$2"; shift 2 ;; --out) OUT="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;; --stages) STAGES="$2"; shift 2 ;; --steps) STEPS="$2"; shift 2 ;;
    --problems) PROBLEMS="$2"; shift 2 ;; --gpus) GPUS="$2"; shift 2 ;; --site) SITE=1; shift ;;
    --time) TIME=(--time "$2"); shift 2 ;; --tiny) TINY=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$MODEL" ] || { echo "--model FOLDER (safetensors, a chat template) is required" >&2; exit 2; }
MODEL="$(cd "$MODEL" && pwd)"
case "$OUT" in /*) ;; *) OUT="$REPO/$OUT" ;; esac
if [ "$GPUS" != none ]; then
  command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this check needs a GPU (--gpus none --tiny: a CPU smoke run)" >&2; exit 1; }
fi
WORK="${WORK:-$(mktemp -d)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
echo "work folder: $WORK"

PY="${PYTHON:-python3}"
NEED="import autorl, trl, mlflow, optuna, datasets, git"
if ! "$PY" -c "$NEED" 2>/dev/null; then
  if [ "$SITE" = 1 ]; then
    TARGET="$PY"
  else
    if [ "$("$PY" -c 'import sys; print(int(sys.prefix != sys.base_prefix))')" = 1 ]; then
      echo "$PY is itself a virtual environment: a venv made from it would not see its torch; rerun with --site" \
           "to install into it" >&2
      exit 2
    fi
    "$PY" -m venv --system-site-packages "$WORK/venv"   # keeps the machine's torch and transformers
    TARGET="$WORK/venv/bin/python"
  fi
  if [ -n "$WHEELS" ]; then
    "$TARGET" -m pip install --quiet --no-index --no-deps --no-cache-dir "$WHEELS"/*.whl
    "$TARGET" -m pip install --quiet --no-index --no-deps --no-build-isolation --no-cache-dir -e .
    "$TARGET" -m pip check || echo "(pip check: the wheels were installed with --no-deps; the lines above are for information)"
  else
    "$TARGET" -m pip install --quiet -e .
  fi
  PY="$TARGET"
  "$PY" -c "$NEED"
fi
AUTORL=("$PY" -m autorl)
"$PY" - <<'PYEOF'
import importlib.metadata as m
names = ["torch", "transformers", "trl", "accelerate", "datasets", "peft", "vllm", "mlflow-skinny", "optuna"]
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "-"
print("packages: " + ", ".join(f"{n} {version(n)}" for n in names))
PYEOF
VLLM=$("$PY" -c "import importlib.util; print('yes' if importlib.util.find_spec('vllm') else 'no')")
[ "$VLLM" = yes ] || echo "vLLM is not installed: rollouts and evaluation use Hugging Face generate"

"${AUTORL[@]}" doctor --runs-dir "$WORK/runs" 2>&1 | tee "$WORK/doctor.txt" || true
"$PY" benchmarks/gpu_sandbox_probe.py --gpus "$GPUS" 2>&1 | tee "$WORK/probe.json" || true

"${AUTORL[@]}" init "$WORK/tpl" --template countdown --base-model "$MODEL"
"$PY" - "$WORK/tpl" "$STEPS" "$PROBLEMS" "$TINY" <<'PYEOF'
import re, sys
from pathlib import Path
root, steps, problems, tiny = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
constants = root / "env" / "constants.toml"
constants.chmod(0o644)
values = {"validation_size": problems, "test_size": problems, "train_size": 2048, "wall_seconds": 300}
space = {"max_steps": [steps]}
if tiny:  # the CPU smoke run of tests/test_real_model.py
    values |= {"completions_per_step": 8, "train_size": 64, "max_new_tokens": 32, "batch_size": 16, "wall_seconds": 900}
    space |= {"num_generations": [4], "max_completion_length": [32], "lora_rank": [0]}
text = constants.read_text()
for key, value in values.items():
    text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    assert n == 1, key
constants.write_text(text)
space_file = root / "space.toml"
text = space_file.read_text()
for key, choices in space.items():  # new choices, the first the default, no grid (tests/conftest.py's narrow_space)
    table = re.search(rf"^\[{key}\]\n(?:(?!\[).*\n?)*", text, re.M).group(0)
    body = re.sub(r"^choices = .*$", f"choices = {choices}", table, flags=re.M)
    body = re.sub(r"^default = .*$", f"default = {choices[0]}", body, flags=re.M)
    text = text.replace(table, re.sub(r"^grid = .*\n", "", body, flags=re.M))
space_file.write_text(text)
PYEOF

SMI=""
if [ "$GPUS" != none ]; then
  nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$WORK/smi.csv" &
  SMI=$!
fi
started=$(date +%s)
rc=0
"${AUTORL[@]}" research "gpu check" --template "$WORK/tpl" --stages "$STAGES" --gpus "$GPUS" --strategy random \
  "${TIME[@]}" --name gpu-check --runs-dir "$WORK/runs" > "$WORK/research.log" 2>&1 || rc=$?
wall=$(( $(date +%s) - started ))
[ -z "$SMI" ] || kill "$SMI" 2>/dev/null || true
tail -25 "$WORK/research.log"
echo "research exit code: $rc, wall $wall s"

"$PY" benchmarks/gpu_check_report.py --work "$WORK" --out "$OUT" --wall "$wall" --exit-code "$rc" --vllm "$VLLM" \
  --model "$MODEL"
exit "$rc"
