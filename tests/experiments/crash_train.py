"""Every stage crashes before training."""

raise RuntimeError("deliberate crash in every stage")
