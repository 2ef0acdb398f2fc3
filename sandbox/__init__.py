"""Where untrusted code runs: trial and evaluator processes, isolated and bounded.

Standard library only, so importing it pulls in no third-party package and no autorl.
"""

from sandbox.cgroups import Limits
from sandbox.errors import SandboxError
from sandbox.executor import RunResult, last_error_line, parse_footer, scrubbed_env
from sandbox.gpus import GpuPool, select_gpus, visible_gpus
from sandbox.tiers import (
    DEFAULT_LIMITS,
    SANDBOX_KINDS,
    BwrapSandbox,
    Mounts,
    Sandbox,
    bwrap_works,
    choose_sandbox,
    warm_works,
)
from sandbox.warm import WorkerPlan

__all__ = [
    "DEFAULT_LIMITS", "SANDBOX_KINDS", "BwrapSandbox", "GpuPool", "Limits", "Mounts", "RunResult", "Sandbox",
    "SandboxError", "bwrap_works", "choose_sandbox", "last_error_line", "parse_footer", "scrubbed_env",
    "select_gpus", "visible_gpus", "warm_works", "WorkerPlan",
]
