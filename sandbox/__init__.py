"""Where untrusted code runs: trial and evaluator processes, isolated and bounded.

Standard library only, so importing it pulls in no third-party package and no autorl.
"""

from sandbox.cgroups import Limits
from sandbox.executor import RunResult, last_error_line, parse_footer, scrubbed_env
from sandbox.tiers import (
    DEFAULT_LIMITS,
    SANDBOX_KINDS,
    BwrapSandbox,
    Mounts,
    Sandbox,
    SandboxError,
    bwrap_works,
    choose_sandbox,
)

__all__ = [
    "DEFAULT_LIMITS", "SANDBOX_KINDS", "BwrapSandbox", "Limits", "Mounts", "RunResult", "Sandbox", "SandboxError",
    "bwrap_works", "choose_sandbox", "last_error_line", "parse_footer", "scrubbed_env",
]
