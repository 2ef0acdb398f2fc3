"""Does a trial see its GPU? Runs torch inside the sandbox a session would pick (the
strongest tier that works, with one GPU bound in as a trial gets it), started cold and
forked from a warm worker, and outside it; prints one JSON object: the tier, and for each
whether torch imports and CUDA is available, the device name, the /dev/nvidia* nodes in
view, and where libcuda was loaded from.

    python benchmarks/gpu_sandbox_probe.py [--gpus auto|none|0]

benchmarks/gpu_check.sh runs it before its session; the CUDA answers differ when the
driver's libraries are found only through a variable the trial's scrubbed environment
drops (LD_LIBRARY_PATH), or when a device node is not bound in.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox import Mounts, WorkerPlan, choose_sandbox, scrubbed_env, select_gpus  # noqa: E402

PROBE = r"""
import json, os
facts = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
         "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"),
         "dev": sorted(p for p in os.listdir("/dev") if p.startswith("nvidia"))}
try:
    import torch
    facts["torch"] = torch.__version__
    facts["cuda"] = torch.cuda.is_available()
    if facts["cuda"]:
        facts["name"] = torch.cuda.get_device_name(0)
        facts["bf16"] = torch.cuda.is_bf16_supported()
        torch.ones(1, device="cuda")
    facts["libcuda"] = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcuda.so" in line})
except Exception as exc:  # the answer is what failed
    facts["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(facts))
"""


def outside() -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-1500:]}


def inside(gpus: list[str]) -> tuple[str, dict, dict]:
    """The probe in the sandbox, started cold (bubblewrap per run) and forked from a warm
    worker (what a session's trials use by default)."""
    notes: list[str] = []
    sandbox = choose_sandbox("auto", gpus=gpus, notify=notes.append)
    answers = {}
    with tempfile.TemporaryDirectory(prefix="autorl-gpu-probe-") as scratch:
        root = Path(scratch)
        for folder in ("workspace", "runs/cold", "runs/warm"):
            (root / folder).mkdir(parents=True)
        script = root / "workspace" / "probe.py"
        script.write_text(PROBE)
        for how in ("cold", "warm"):
            run_dir = root / "runs" / how
            if how == "warm":
                sandbox.start_worker(WorkerPlan(hidden_roots=[root / "runs"], visible=[root / "workspace"],
                                                home=root / "worker"))
            try:
                result = sandbox.run([sys.executable, str(script)], run_dir, 300, scrubbed_env(run_dir),
                                     Mounts(read_only=[root / "workspace"], writable=[run_dir]))
            finally:
                sandbox.stop_worker()
            said = result.stdout_path.read_text(errors="replace").strip()
            stderr = result.stderr_path.read_text(errors="replace").strip()
            try:
                facts = json.loads(said.splitlines()[-1])
            except (ValueError, IndexError):
                facts = {"error": f"exit {result.returncode}: {(said + ' ' + stderr)[-1500:]}"}
            facts["started"] = result.worker
            if stderr:
                facts["stderr"] = stderr[-1500:]
            answers[how] = facts
    if notes:
        answers["cold"]["notes"] = notes
    return sandbox.describe(), answers["cold"], answers["warm"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="auto")
    gpus = select_gpus(parser.parse_args().gpus)[:1]  # a trial gets one
    tier, cold, warm = inside(gpus)
    print(json.dumps({"sandbox": tier, "gpu": gpus[0] if gpus else None, "trial": warm, "trial_cold": cold,
                      "host": outside()}, indent=1))


if __name__ == "__main__":
    main()
