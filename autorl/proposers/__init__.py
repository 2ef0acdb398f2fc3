"""Proposers decide what the next stage trains: hyperparameters (and, later, edits)."""

from autorl.proposers.base import Proposal, Proposer
from autorl.proposers.random_search import RandomProposer
from autorl.proposers.tpe import TpeProposer

__all__ = ["Proposal", "Proposer", "RandomProposer", "TpeProposer"]
