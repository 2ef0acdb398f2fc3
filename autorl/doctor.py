"""``autorl doctor``: what this machine gives a session, checked rather than assumed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

Check = tuple[str, "bool | None", str]  # title, ok (None: not applicable), detail


def sandbox_checks(kind: str) -> Iterator[Check]:
    from sandbox import SandboxError, choose_sandbox

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


def gpu_check() -> Check:
    if shutil.which("nvidia-smi") is None:
        return "GPU", None, "none (CPU templates only; GPU templates need NVIDIA devices and vLLM)"
    done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30)
    return "GPU", done.returncode == 0, done.stdout.strip().replace("\n", "; ") or done.stderr.strip()


def llm_check(base_url: str | None) -> Check:
    if not base_url:
        return "LLM endpoint", None, "not configured (--llm-base-url / OPENAI_BASE_URL); strategies tree and baselines need none"
    import httpx

    try:
        response = httpx.get(base_url.rstrip("/") + "/models", timeout=10)
    except httpx.HTTPError as exc:
        return "LLM endpoint", False, f"{base_url}: {exc.__class__.__name__}: {exc}"
    return "LLM endpoint", response.status_code < 500, f"{base_url}: HTTP {response.status_code}"


def tracking_check(runs_dir: Path | None, tracking_uri: str | None) -> Check:
    from autorl.config import default_runs_dir, prepare_runs_dir
    from autorl.errors import AutorlError
    from autorl.tracking import Tracker

    try:
        runs = prepare_runs_dir(runs_dir or default_runs_dir())
        tracker = Tracker.for_runs_dir(runs, tracking_uri)
        tracker.ensure_store()
    except AutorlError as exc:
        return "tracking store", False, str(exc)
    free = shutil.disk_usage(runs).free / 2**30
    return "tracking store", True, f"{tracker.uri} ({len(tracker.sessions())} sessions; {free:.1f} GiB free in {runs})"


def checks(sandbox: str, llm_base_url: str | None, runs_dir: Path | None, tracking_uri: str | None) -> Iterator[Check]:
    yield from sandbox_checks(sandbox)
    yield gpu_check()
    yield llm_check(llm_base_url)
    yield tracking_check(runs_dir, tracking_uri)
