"""Population based training (Jaderberg et al., 2017) as a baseline, in autorl's stage model.

A population of ``size`` members trains in rounds: each round gives every member one
stage, continuing from its own last checkpoint. Between rounds the worst quarter
*exploits* (takes a checkpoint and the values of a random member of the best quarter)
and *explores* (perturbs those values: ``SearchSpace.mutate``, a random step of up to a
quarter of each changed parameter's range). A stage costs one stage of the budget,
exactly as any strategy's.

The state is never kept, only replayed: member ``i % size`` runs the ``i``-th PBT node
of the tree in round ``i // size``, and every exploit decision follows from the scores of
finished rounds and the seed. A resumed session therefore continues where it stopped.
With ``--parallel`` a round's members train side by side (synchronous PBT): the next
round waits until every stage of this one has been scored.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from search.proposers.base import BaseProposer, Proposal, ProposalDeferred
from search.space import SearchSpace
from search.tree import Node, Status, Tree

RUNNING = (Status.PENDING, Status.RUNNING, Status.INTERRUPTED)


@dataclass
class Member:
    tip: str | None  # the node this member continues from (None: the base model)
    values: dict[str, Any]
    note: str = ""  # how its values came about this round


class PbtProposer(BaseProposer):
    name = "pbt"
    chooses_parent = True

    def __init__(self, space: SearchSpace, size: int = 4, seed: int = 0):
        self.space = space
        self.size = size
        self.seed = seed
        self.redraws = 0  # explorations drawn again because they repeated a sibling

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        ran = self.population_nodes(tree)
        round_, index = divmod(len(ran), self.size)
        unfinished = [n.id for n in ran[(round_ - 1) * self.size:] if n.status in RUNNING] if round_ else []
        if unfinished:  # exploit needs every score of the round before (stages of one round run side by side)
            raise ProposalDeferred(f"PBT round {round_ + 1} waits for round {round_}: {', '.join(unfinished)} running")
        member = self.members(tree, ran, round_)[index]
        values = member.values
        if self.redraws:
            values = self.space.mutate(values, self.rng("redraw", round_, index, self.redraws), changes=2)
        return Proposal(parent=member.tip, hyperparameters=values,
                        rationale=f"PBT round {round_ + 1}, member {index + 1} of {self.size}: {member.note}")

    def population_nodes(self, tree: Tree) -> list[Node]:
        return [n for n in tree.nodes.values() if n.proposer == self.name]

    def rng(self, *keys: Any) -> random.Random:
        return random.Random(":".join(map(str, ("pbt", self.seed, *keys))))

    def members(self, tree: Tree, ran: list[Node], round_: int) -> list[Member]:
        """The population as it stands at the start of ``round_``, replayed from the tree."""
        members = self.first_round()
        for past in range(round_):
            stages = ran[past * self.size:(past + 1) * self.size]
            members = self.next_round(members, stages, past + 1)
        return members

    def first_round(self) -> list[Member]:
        members = [Member(None, self.space.defaults(), "the template's defaults")]
        for index in range(1, self.size):
            members.append(Member(None, self.space.sample(self.rng("init", index)), "a random start"))
        return members

    def next_round(self, members: list[Member], stages: list[Node], round_: int) -> list[Member]:
        """Continue every member from its stage; the worst quarter exploits and explores."""
        score = {i: stage.val_score if stage.scored else -math.inf for i, stage in enumerate(stages)}
        ranked = sorted(score, key=lambda i: (score[i], -i), reverse=True)
        quarter = max(1, self.size // 4)
        top, bottom = ranked[:quarter], set(ranked[-quarter:])
        rng = self.rng("exploit", round_)
        after = []
        for i, (_member, stage) in enumerate(zip(members, stages)):
            if i not in bottom and stage.scored:
                after.append(Member(stage.id, stage.hyperparameters, f"continues {stage.id}"))
                continue
            donor = stages[rng.choice(top)]
            if not donor.scored:  # the whole population failed: start again from the base model
                after.append(Member(None, self.space.sample(rng), "a random restart"))
                continue
            values = self.space.mutate(donor.hyperparameters, rng, changes=max(1, len(self.space.params) // 3))
            after.append(Member(donor.id, values, f"exploits {donor.id} (val {donor.val_score:.3f}, "
                                                  f"own {fmt(stage)}) and explores its values"))
        return after

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        self.redraws += 1

    def parents(self, tree: Tree) -> set[str]:
        """The stages of the last whole round and of the one in progress: a member continues,
        or exploits, a stage of the round just before its own."""
        ran = self.population_nodes(tree)
        round_ = len(ran) // self.size
        return {n.id for n in ran[max(0, round_ - 1) * self.size:]}

    def observe(self, tree: Tree, node: Node) -> None:
        self.redraws = 0


def fmt(stage: Node) -> str:
    return f"{stage.val_score:.3f}" if stage.scored else stage.status.value
