#!/usr/bin/env bash
# benchmarks/gpu_check.sh on a bare, offline CUDA machine that is reached by copying a
# folder at a time (a lent GPU box with a size limit per copy), as root. What it is given
# comes from benchmarks/gpu_check_carry.sh DIR --bare --split MIB, spread over the copies.
# Run from the repository root there; each step is idempotent and keeps its files in
# $STAGE (default /tmp/gpu-check), which must survive between the copies.
#
#   gpu_check_device.sh stage FOLDER...    copy carried folders' files into $STAGE
#   gpu_check_device.sh prep               facts; bwrap and git if missing; the wheels and
#                                          autorl into python3's own environment (--site);
#                                          autorl doctor; benchmarks/gpu_sandbox_probe.py
#   gpu_check_device.sh run STEPS [TIME] OUTDIR
#                                          join and check the model, convert it, run
#                                          gpu_check.sh (results and a log tarball to OUTDIR)
#
# Installs into the system: bwrap into /usr/bin (autorl's probe looks for it with
# PATH=/usr/bin:/bin), the libraries it lacks into /usr/lib/x86_64-linux-gnu, git into
# /usr/local/bin. Meant for a throwaway machine. With FIX_LD=1, when the probe finds CUDA
# outside the sandbox but not in a trial and libcuda came from a folder the loader only
# knows through LD_LIBRARY_PATH (which a trial's scrubbed environment drops), that folder
# is added to /etc/ld.so.conf.d and the probe repeated.
set -uo pipefail
STAGE="${STAGE:-/tmp/gpu-check}"
mkdir -p "$STAGE"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PATH="/usr/local/bin:$PATH"
step() { echo; echo "=== $* ($(date +%T))"; }

tools() {
  if [ ! -x /usr/bin/bwrap ] && [ ! -x /bin/bwrap ] && command -v bwrap >/dev/null; then
    echo "bwrap at $(command -v bwrap) is not in /usr/bin or /bin, where autorl's probe looks: linking it"
    ln -s "$(command -v bwrap)" /usr/bin/bwrap
  fi
  if ! command -v bwrap >/dev/null && [ -f "$STAGE/bubblewrap.deb" ]; then
    mkdir -p "$STAGE/x/bwrap" "$STAGE/x/libs"
    dpkg -x "$STAGE/bubblewrap.deb" "$STAGE/x/bwrap"
    for deb in "$STAGE/libcap2.deb" "$STAGE/libselinux1.deb"; do [ -f "$deb" ] && dpkg -x "$deb" "$STAGE/x/libs"; done
    for lib in $(ldd "$STAGE/x/bwrap/usr/bin/bwrap" | awk '/not found/ {print $1}'); do
      found=$(find "$STAGE/x/libs" -name "$lib" | head -1)
      echo "bwrap needs $lib: ${found:-not carried}"
      [ -n "$found" ] && cp -a "$(dirname "$found")/${lib%%.so*}".so* /usr/lib/x86_64-linux-gnu/
    done
    install -m 0755 "$STAGE/x/bwrap/usr/bin/bwrap" /usr/bin/bwrap && echo "installed bwrap into /usr/bin"
  fi
  if ! command -v git >/dev/null && [ -f "$STAGE/git-bin.tar.xz" ]; then
    mkdir -p "$STAGE/x/git" && tar -C "$STAGE/x/git" -xJf "$STAGE/git-bin.tar.xz"
    install -m 0755 "$STAGE/x/git/usr/bin/git" /usr/local/bin/git && echo "installed git into /usr/local/bin"
  fi
}

install_python() {
  python3 -c "import autorl, trl, mlflow, optuna, datasets, git" 2>/dev/null && return 0
  python3 -m pip install --quiet --no-index --no-deps --no-cache-dir --no-compile "$STAGE"/wheels/*.whl
  echo "wheels: exit code $?"
  python3 -m pip install --quiet --no-index --no-deps --no-build-isolation --no-cache-dir -e .
  echo "autorl: exit code $?"
}

probe() {
  timeout 300 python3 benchmarks/gpu_sandbox_probe.py --gpus auto | tee "$STAGE/$1"
}

case "${1:-}" in
stage)
  shift
  for folder in "$@"; do cp -r "$folder"/. "$STAGE"/; done
  ls -la "$STAGE"
  ;;
prep)
  step "facts"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  head -2 /etc/os-release; uname -r; nproc; free -g | head -2; df -h "$STAGE" | tail -1; id
  echo "python3: $(command -v python3) -> $(readlink -f "$(command -v python3)")"
  python3 -c "import sys; print('prefix', sys.prefix, 'base', sys.base_prefix, sys.version)"
  echo "repo: $PWD"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  ls /dev/nvidia* 2>&1 | tr '\n' ' '; echo; ldconfig -p | grep -E "libcuda\.so" | head -3
  echo "git: $(command -v git || echo none); bwrap: $(command -v bwrap || echo none)"
  stat -fc 'cgroup fs: %T' /sys/fs/cgroup; echo "max_user_namespaces: $(cat /proc/sys/user/max_user_namespaces 2>/dev/null)"
  python3 -m pip list 2>/dev/null | grep -i -E "^(typer|rich|click|pyarrow|fsspec|huggingface.hub|peft|numpy|pandas|pydantic|protobuf|vllm|trl|datasets|torch|transformers|accelerate|tokenizers) " | tr -s ' ' | tr '\n' ';'; echo
  step "tools"
  tools
  bwrap --unshare-user --uid 65534 --unshare-pid --unshare-net --ro-bind / / --proc /proc --dev /dev true \
    && echo "bwrap namespaces: ok" || echo "bwrap namespaces: FAILED"
  step "python packages into $(python3 -c 'import sys; print(sys.prefix)') (--no-deps), autorl -e"
  install_python
  python3 -m pip check | grep -v -E "^autorl " | head -20
  python3 -c "import autorl.cli, trl, mlflow, optuna, datasets, git; print('imports ok, trl', trl.__version__)"
  step "doctor"
  python3 -m autorl doctor --runs-dir "$STAGE/doctor-runs"
  step "probe"
  probe probe.json
  fix=$(python3 - "$STAGE/probe.json" <<'EOF'
import json, os, sys
try:
    p = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit()
host, trial = p.get("host") or {}, p.get("trial") or {}
if host.get("cuda") and not trial.get("cuda") and host.get("libcuda"):
    print(" ".join(sorted({os.path.dirname(x) for x in host["libcuda"]})))
EOF
)
  if [ -n "$fix" ]; then
    echo "a trial lacks CUDA; the host loads libcuda from $fix"
    if [ "${FIX_LD:-0}" = 1 ]; then
      step "FIX_LD: $fix into /etc/ld.so.conf.d, probing again"
      echo "$fix" | tr ' ' '\n' > /etc/ld.so.conf.d/zz-autorl-gpu-check.conf && ldconfig
      probe probe2.json
    fi
  fi
  ;;
run)
  STEPS="${2:?run STEPS [TIME] OUTDIR}" TIMEARG=()
  if [ $# -ge 4 ]; then TIMEARG=(--time "$3"); OUTDIR="$4"; else OUTDIR="${3:?run STEPS [TIME] OUTDIR}"; fi
  mkdir -p "$OUTDIR"
  step "model"
  gguf="$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -f "$gguf" ]; then cat "$STAGE"/model.part-* > "$gguf"; fi
  (cd "$STAGE" && sha256sum -c model.sha256) || { echo "the model's parts do not add up"; exit 3; }
  tools
  install_python
  python3 benchmarks/gguf_to_safetensors.py "$gguf" "$STAGE/model" 2>&1 | grep -v "it/s\]" | tail -3
  step "gpu_check.sh --steps $STEPS ${TIMEARG[*]}"
  rm -rf "$STAGE/work"
  benchmarks/gpu_check.sh --model "$STAGE/model" --site --wheels "$STAGE/wheels" --work "$STAGE/work" \
    --steps "$STEPS" "${TIMEARG[@]}" --out "$OUTDIR/gpu_check.md"
  rc=$?
  echo "gpu_check.sh: exit code $rc"
  step "logs"
  (cd "$STAGE/work" && tar czf "$OUTDIR/logs.tgz" --exclude='*.safetensors' --exclude='workspace' \
    --exclude='mlflow.db' --exclude='artifacts' --exclude='checkpoint' --exclude='trainer' \
    doctor.txt probe.json research.log smi.csv tpl/env/constants.toml tpl/space.toml runs/sessions 2>/dev/null)
  ls -la "$OUTDIR"
  exit "$rc"
  ;;
*) echo "usage: gpu_check_device.sh stage FOLDER... | prep | run STEPS [TIME] OUTDIR" >&2; exit 2 ;;
esac
