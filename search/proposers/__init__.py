"""Proposers decide what the next stage trains: where it starts, its values, any edit."""

from search.proposers.base import BaseProposer, Proposal, ProposalDeferred, ProposalDropped, Proposer
from search.proposers.greedy import GreedyProposer
from search.proposers.guard import Guarded
from search.proposers.llm import LLMProposer
from search.proposers.pbt import PbtProposer
from search.proposers.schedules import DefaultsProposer, FlatTpeProposer, GridProposer, RandomScheduleProposer
from search.proposers.tpe import TpeProposer

__all__ = ["BaseProposer", "DefaultsProposer", "Guarded", "PbtProposer", "FlatTpeProposer", "GreedyProposer",
           "GridProposer", "LLMProposer",
           "Proposal", "ProposalDeferred", "ProposalDropped", "Proposer", "RandomScheduleProposer", "TpeProposer"]
