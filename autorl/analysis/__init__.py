"""Reading a stage's evidence: its metric curves, the findings of the diagnosis, and the
noise of a score (paired comparisons against the parent on the same items)."""
