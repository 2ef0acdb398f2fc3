"""Proposers decide what the next stage trains: where it starts, its values, any edit."""

from search.proposers.base import BaseProposer, Proposal, ProposalDropped, Proposer
from search.proposers.dedup import Deduplicated
from search.proposers.greedy import GreedyProposer
from search.proposers.llm import LLMProposer
from search.proposers.schedules import FlatTpeProposer, GridProposer, RandomScheduleProposer
from search.proposers.tpe import TpeProposer

__all__ = ["BaseProposer", "Deduplicated", "FlatTpeProposer", "GreedyProposer", "GridProposer", "LLMProposer", "Proposal",
           "ProposalDropped", "Proposer", "RandomScheduleProposer", "TpeProposer"]
