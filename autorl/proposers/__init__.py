"""Proposers decide what the next stage trains: hyperparameters (and, later, edits)."""

from autorl.proposers.base import Proposal, Proposer
from autorl.proposers.greedy import GreedyProposer
from autorl.proposers.schedules import FlatTpeProposer, GridProposer, RandomScheduleProposer
from autorl.proposers.tpe import TpeProposer

__all__ = ["FlatTpeProposer", "GreedyProposer", "GridProposer", "Proposal", "Proposer", "RandomScheduleProposer",
           "TpeProposer"]
