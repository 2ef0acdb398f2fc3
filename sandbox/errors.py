"""The sandbox's one error class (it never imports autorl)."""


class SandboxError(Exception):
    """A tier or device that was asked for cannot be had on this machine; the message says why."""
