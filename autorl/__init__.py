"""The application that composes search and sandbox: CLI, config, templates, session
and controller, stage runner, frozen evaluator, diagnosis, tracking, resume, report,
live view, TUI and doctor."""

__version__ = "0.1.0"
