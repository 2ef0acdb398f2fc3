"""``autorl doctor``: what this machine gives a session, checked rather than assumed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

Check = tuple[str, "bool | None", str]  # title, ok (None: not applicable), detail


def sandbox_checks(kind: str) -> Iterator[Check]:
    from sandbox import SandboxError, choose_sandbox, warm_works

    warnings: list[str] = []
    try:
        sandbox = choose_sandbox(kind, notify=warnings.append)
    except SandboxError as exc:
        yield "sandbox", False, str(exc)
        return
    yield "sandbox", sandbox.tier == "bwrap", sandbox.describe() + "".join(f" ({w})" for w in warnings)
    for guarantee, held in sandbox.guarantees().items():
        yield f"  {guarantee}", held, "yes" if held else "NO"
    cgroups = sandbox.cgroups or "none writable"
    yield "  cgroups", sandbox.cgroups is not None, f"{cgroups}; per-trial limits {sandbox.limits.describe()}"
    yield ("  warm workers", *warm_works(sandbox))


def gpu_checks() -> Iterator[Check]:
    """GPUs, driver, CUDA and bf16 as the trial's Python sees them, vLLM, and the engine a
    session would use (torch is imported in a child process: the CLI stays light)."""
    from sandbox import visible_gpus

    if not visible_gpus():
        yield "GPU", None, "none: trials train on the CPU (real-model templates need NVIDIA GPUs to be fast)"
        return
    done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version",
                           "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    for line in done.stdout.strip().splitlines():
        yield "GPU", True, line.strip()
    probe = ("import importlib.util, json, torch; c = torch.cuda.is_available(); "
             "print(json.dumps({'cuda': torch.version.cuda, 'available': c, "
             "'bf16': c and torch.cuda.is_bf16_supported(), 'vllm': importlib.util.find_spec('vllm') is not None}))")
    try:
        facts = json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                          timeout=120).stdout)
    except (ValueError, subprocess.TimeoutExpired) as exc:
        yield "CUDA", False, f"torch could not be asked ({exc})"
        return
    yield "CUDA", facts["available"], f"torch built for CUDA {facts['cuda'] or 'none (a CPU build)'}"
    yield "  bf16", facts["bf16"], "yes" if facts["bf16"] else "no (fp32 training)"
    yield "  vLLM", facts["vllm"], "installed" if facts["vllm"] else "not installed: `scripts/setup --gpu` installs it"
    engine = "vllm (TRL colocate mode)" if facts["available"] and facts["vllm"] else "Hugging Face generate"
    yield "  generation engine", facts["available"], engine


def llm_check(base_url: str | None) -> Check:
    if not base_url:
        return ("LLM endpoint", None,
                "not configured (--llm-base-url / OPENAI_BASE_URL); strategies tree and baselines need none")
    import httpx

    try:
        response = httpx.get(base_url.rstrip("/") + "/models", timeout=10)
    except httpx.HTTPError as exc:
        return "LLM endpoint", False, f"{base_url}: {exc.__class__.__name__}: {exc}"
    return "LLM endpoint", response.status_code < 500, f"{base_url}: HTTP {response.status_code}"


def tracking_check(runs_dir: Path | None, tracking_uri: str | None) -> Check:
    from autorl.config import default_runs_dir
    from autorl.errors import AutorlError
    from autorl.storage.tracking import Tracker

    runs = (runs_dir or default_runs_dir()).expanduser().resolve()
    tracker = Tracker.for_runs_dir(runs, tracking_uri, create=False)
    if not tracker.exists():
        return "tracking store", None, f"{tracker.uri}: not created yet (`autorl research` creates it)"
    try:
        tracker.ensure_store()
    except AutorlError as exc:
        return "tracking store", False, str(exc)
    free = shutil.disk_usage(next(p for p in (runs, *runs.parents) if p.is_dir())).free / 2**30
    return "tracking store", True, f"{tracker.uri} ({len(tracker.sessions())} sessions; {free:.1f} GiB free in {runs})"


def ray_check() -> Check:
    """Whether --executor ray (without --ray-address) finds a Ray head on this machine."""
    from autorl.stages.ray_stages import LOCAL_ADDRESS, answers

    if answers(LOCAL_ADDRESS):
        return "Ray", True, f"a head answers at {LOCAL_ADDRESS} (--executor ray uses it)"
    return "Ray", None, "no head on this machine; --executor ray starts one (or `autorl server up --ray`)"


def checks(sandbox: str, llm_base_url: str | None, runs_dir: Path | None, tracking_uri: str | None) -> Iterator[Check]:
    yield from sandbox_checks(sandbox)
    yield from gpu_checks()
    yield llm_check(llm_base_url)
    yield tracking_check(runs_dir, tracking_uri)
    yield ray_check()
