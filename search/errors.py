"""Errors of the search layer; the CLI turns them into one line and an exit code."""


class SearchError(Exception):
    """A problem the user can act on; its message says what to do."""


class ProposalError(SearchError):
    """A proposal that does not fit the space or the tree; the message is written to be sent back to an LLM."""


class SpaceError(SearchError):
    """A ``space.toml`` that cannot be read or is inconsistent."""


class LLMSetupError(SearchError):
    """An LLM set-up that cannot work: an unreadable key file, a cost cap without a price."""
