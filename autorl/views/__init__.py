"""What a person sees: the live view, the TUI (run here, or attached through the
session's channel), and the session report with its figures."""
