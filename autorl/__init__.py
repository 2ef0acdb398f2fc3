"""autorl: an autonomous research agent for RL post-training of language models."""

__version__ = "0.1.0"
