"""How far a rebuilt base model lands from the shipped one under numeric variants.

Rebuilds a template's base model with its own ``env/prepare.py`` under variants that
change the floating-point path or the warm-up data order — torch thread counts, the
data-order seed (``--data-seed``; the model's init seed stays the recipe's), and ATen's
and MKL's portable kernels instead of the AVX ones (a stand-in for another CPU) —
scores each rebuild on the validation split with the template's frozen evaluator
(``env/evaluate.py``), and compares it with the shipped ``env/base_model``: within
noise when the difference is at most twice the combined standard error.

    .venv/bin/python benchmarks/base_model_spread.py --template arith --section "arith, after"

To measure an older recipe, point ``--env-dir`` at a copy of ``env/`` holding its
prepare.py (with ``--data-seed`` and ``--threads``) and its shipped base_model/. One build
or evaluation runs at a time unless ``--jobs`` says more (on a machine with spare cores).
A variant whose weights are byte-identical to an earlier one's (or the shipped model's)
is not scored again. Each run writes (or replaces) its own section, titled
``--section``, in ``--out``; other sections are kept.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "base_model_spread.md"
# A stand-in for a CPU without AVX: ATen's portable kernels and MKL held to SSE4.2.
NO_AVX = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
# name -> (extra prepare.py arguments, extra environment). The seed and no-AVX variants run on one
# thread, so that each differs from the one-thread build in one thing only.
VARIANTS = {
    "recipe default": ([], {}),
    "threads 1": (["--threads", "1"], {}),
    "threads 2": (["--threads", "2"], {}),
    "threads 4": (["--threads", "4"], {}),
    "data seed 1": (["--data-seed", "1", "--threads", "1"], {}),
    "data seed 2": (["--data-seed", "2", "--threads", "1"], {}),
    "data seed 3": (["--data-seed", "3", "--threads", "1"], {}),
    "no AVX kernels": (["--threads", "1"], NO_AVX),
}


def weights_hash(model_dir: Path) -> str:
    return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()


def build(env_dir: Path, out: Path, args: list[str], extra_env: dict) -> float:
    started = time.perf_counter()
    # Passive OpenMP waiting changes no result, only spares a busy machine the spinning threads.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", **extra_env}
    done = subprocess.run([sys.executable, str(env_dir / "prepare.py"), "--out", str(out), *args],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"prepare.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def score(env_dir: Path, checkpoint: Path, out: Path, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, str(env_dir / "evaluate.py"), "--checkpoint", str(checkpoint),
                           "--split", "validation", "--out", str(out)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"evaluate.py {checkpoint} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def replace_section(path: Path, title: str, body: str) -> None:
    """Write ``## title`` with body into path, replacing a section of that title if present."""
    text = path.read_text() if path.exists() else "# Base model spread\n"
    section = f"## {title}\n\n{body.rstrip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", default="arith")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--jobs", type=int, default=1, help="builds or evaluations at once (default one)")
    parser.add_argument("--eval-threads", type=int, default=1, help="torch threads of each evaluation")
    parser.add_argument("--section", default=None, help="section title (default: the template's name)")
    parser.add_argument("--note", default="", help="a line under the section title (the recipe, say)")
    parser.add_argument("--env-dir", type=Path, default=None,
                        help="an env/ folder to build from instead of the template's (a copy holding an older recipe)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    env_dir = args.env_dir or ROOT / "templates" / args.template / "env"
    recipe = hashlib.sha256((env_dir / "prepare.py").read_bytes()).hexdigest()[:12]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        tmp = Path(tmp)
        shipped = score(env_dir, env_dir / "base_model", tmp / "shipped.json", args.eval_threads)
        print(f"shipped: {shipped['mean']:.3f} ± {shipped['stderr']:.3f}", flush=True)
        outs = [tmp / f"v{index}" for index in range(len(args.variants))]
        seconds = list(pool.map(lambda job: build(env_dir, job[1], *VARIANTS[job[0]]), zip(args.variants, outs)))
        digests = [weights_hash(out) for out in outs]
        shipped_digest = weights_hash(env_dir / "base_model")
        first = {}  # weights hash -> index of the first variant that built them
        for index, digest in enumerate(digests):
            first.setdefault(digest, index)
        unique = [index for index in sorted(set(first.values())) if digests[index] != shipped_digest]
        scored = dict(zip(unique, pool.map(lambda i: score(env_dir, outs[i], tmp / f"v{i}.json", args.eval_threads),
                                            unique)))
        for index, name in enumerate(args.variants):
            digest = digests[index]
            if digest == shipped_digest:
                same, result = "the shipped model", shipped
            else:
                same = args.variants[first[digest]] if first[digest] != index else None
                result = scored[first[digest]]
            delta = result["mean"] - shipped["mean"]
            noise = 2 * math.sqrt(result["stderr"] ** 2 + shipped["stderr"] ** 2)
            rows.append((name, " ".join(VARIANTS[name][0]), seconds[index], result, delta, noise, same))
            print(f"{name}: {result['mean']:.3f} ± {result['stderr']:.3f}  Δ {delta:+.3f} (noise {noise:.3f})"
                  f"{'  identical weights to ' + same if same else ''}  build {seconds[index]:.0f} s", flush=True)
    jobs = f"; {args.jobs} builds at a time" if args.jobs > 1 else ""
    lines = [
        f"Template `{args.template}`, prepare.py sha256 `{recipe}…`; machine: {cpu_name()}, torch {torch.__version__} "
        f"({torch.backends.cpu.get_cpu_capability()}), {os.cpu_count()} cores; evaluation with {args.eval_threads} "
        f"thread(s) on the {shipped['n']:,} validation problems{jobs}.",
        "",
    ]
    if args.note:
        lines += [args.note, ""]
    lines += [
        f"Shipped model: **{shipped['mean']:.3f} ± {shipped['stderr']:.3f}**.",
        "",
        "| variant | prepare.py arguments | build (s) | validation | Δ vs shipped | 2×combined SE | within noise |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, extra, seconds, result, delta, noise, same in rows:
        extra_env = VARIANTS[name][1]
        env_note = " (env: " + ", ".join(f"{k}={v}" for k, v in extra_env.items()) + ")" if extra_env else ""
        ident = f" (weights identical to {same})" if same else ""
        verdict = "yes" if abs(delta) <= noise else "**no**"
        lines.append(f"| {name}{ident} | `{extra}`{env_note} | {seconds:.0f} | {result['mean']:.3f} ± "
                     f"{result['stderr']:.3f} | {delta:+.3f} | {noise:.3f} | {verdict} |")
    within = sum(abs(delta) <= noise for *_, delta, noise, _ in rows)
    means = [result["mean"] for *_, result, _, _, _ in rows]
    lines += ["", f"{within} of {len(rows)} variants within noise; rebuilds range {min(means):.3f}–{max(means):.3f}."]
    replace_section(args.out, args.section or args.template, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
