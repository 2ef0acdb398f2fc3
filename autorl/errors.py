"""One error hierarchy. Library code raises these; only the CLI turns them into a
red line and an exit code.

The two lower layers have their own base class (they never import autorl):
``search.errors.SearchError`` and ``sandbox.SandboxError``. ``USER_ERRORS`` is the set
the CLI catches.
"""

from sandbox import SandboxError
from search.errors import SearchError


class AutorlError(Exception):
    """A problem the user can act on; its message says what to do."""


class ConfigError(AutorlError):
    """A bad option or value (duration, stage count, runs directory, …)."""


class TemplateError(AutorlError):
    """An unknown template, or one missing files it needs."""


class TrackingError(AutorlError):
    """The MLflow store cannot be reached, created or read."""


class RecordError(TrackingError):
    """A record in the tracking store cannot be decoded: named, never read as a default."""


class SessionError(AutorlError):
    """A session that does not exist, or already exists."""


class FrozenFileError(AutorlError):
    """A frozen environment file changed since the session started: scoring stops."""


class CheckpointError(AutorlError):
    """A checkpoint that is missing or carries something other than weights."""


class ContractError(AutorlError):
    """A template file, trial or evaluator output that breaks the template contract (docs/templates.md)."""


class DataFileError(AutorlError):
    """A data file, or an option about it, that cannot make a template (`init --from-data`)."""


class SearchExhausted(AutorlError):
    """The proposer keeps producing nothing that may run: the session stops instead of looping."""


USER_ERRORS = (AutorlError, SearchError, SandboxError)
