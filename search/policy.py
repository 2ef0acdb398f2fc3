"""Tree policy: which node to extend with the next stage.

UCT-style best-first over noise-aware scores. Every expandable node (the base model,
and each scored node shallower than the depth limit) is valued

    validation score + c · stderr · sqrt(ln(N + 1) / (children + 1))

so the exploration bonus is measured in the node's own standard errors: a node within
a couple of standard errors of the leader still gets tried, one far below it does not.
Failed children count as visits, so a node whose stages keep crashing is tried less.
Ties are broken by an RNG seeded from the session seed and the node count, so a search
is reproducible for a seed, also across a resume.

Fresh roots: the base model is a candidate like any node, and the session's first
``min_roots`` stages start from it outright, so the search never bets everything on one
first stage. The rule holds only while every stage so far started from the base model:
a proposer that may choose another parent (the LLM) and extended a first stage instead is
not told "base" again and again on the rule's account (UCT decides from then on), and
the rule never spends the budget's last stage on a root that could not be extended. It
holds only for a budget of at least ``ROOT_STAGES`` stages per fresh root: on a budget of
three stages a second root would cost a third of it at depth 1. The LLM strategies suggest
with ``min_roots=1``: a model that reads the tree and the budget opens a second root when it
has a reason to, and the rule's pick cost a 160-step session a fifth of its steps at depth 1.

Diagnosis steers it: a node that is worse than its parent beyond noise, or whose
stage shows a critical pathology (reward collapse, non-finite values, no gradient,
reward hacking), is not extended while any other candidate exists.

Budget-aware: broad early, deep late. The exploration bonus shrinks with the share of
the stage budget left, so the last stages go to the strongest nodes; and when fewer
stages are left than a fresh first stage would need to be extended even once, the base
model is no longer a candidate (a new root then cannot pay off).

Leaf width (optional, off by default): a node one stage above the depth limit takes at
most ``leaf_width`` children, so the spare stages of a long budget grow another lineage
down to the limit instead of more siblings of one node. Measured level with no limit
(benchmarks/results/search_ablation-arith-24-leaf-width.md): without it, the winner was
often a late sibling at the last level, so those stages were not wasted.
"""

from __future__ import annotations

import math
import random

from search.tree import Node, Tree, may_extend

ROOT_STAGES = 3  # the fresh-roots rule wants at least this many stages of budget per root


class BestFirstPolicy:
    def __init__(self, max_depth: int, exploration: float = 2.0, seed: int = 0, min_roots: int = 2,
                 budget_aware: bool = True, leaf_width: int | None = None):
        self.max_depth = max_depth
        self.leaf_width = leaf_width
        self.budget_aware = budget_aware
        self.exploration = exploration  # in standard errors of the node's score
        self.min_roots = min_roots
        self.seed = seed
        self.budget_stages: int | None = None  # the session's budget in stages, as select last saw it

    def candidates(self, tree: Tree) -> list[str | None]:
        """The base model (None) and every scored, healthy node that may get another stage
        (below the depth limit, or past it while still improving: ``may_extend``)."""
        return [None] + [n.id for n in tree.scored() if may_extend(n, self.max_depth) and n.healthy
                         and not self.last_level_is_full(tree, n)]

    def reachable(self, tree: Tree, max_nodes: int | None) -> set[str]:
        """The nodes this policy may still pick: its candidates, less those whose score plus
        the largest bonus they could ever get (at ``max_nodes`` nodes, with no more children)
        stays below the score of a candidate that remains one (its bonus is never negative)."""
        nodes = {c for c in self.candidates(tree) if c is not None}
        lasting = [tree.score_of(c) or 0.0 for c in nodes
                   if self.leaf_width is None or tree.nodes[c].depth != self.max_depth - 1]
        if max_nodes is None or not lasting:
            return nodes
        floor = max(lasting)

        def ceiling(node_id: str) -> float:
            visits = len(tree.children(node_id))
            stderr = tree.stderr_of(node_id) or tree.typical_stderr()
            return (tree.score_of(node_id) or 0.0) + self.exploration * stderr * math.sqrt(
                math.log(max_nodes + 1) / (visits + 1))

        return {c for c in nodes if ceiling(c) >= floor - 1e-9}

    def last_level_is_full(self, tree: Tree, node: Node) -> bool:
        """Whether a node whose children are leaves already has its ``leaf_width`` of them."""
        if self.leaf_width is None or node.depth != self.max_depth - 1:
            return False
        return len(tree.children(node.id)) >= self.leaf_width

    def value(self, tree: Tree, node_id: str | None, share_left: float = 1.0) -> float:
        visits = len(tree.children(node_id))
        stderr = tree.stderr_of(node_id) or tree.typical_stderr()
        bonus = self.exploration * share_left * stderr * math.sqrt(math.log(len(tree.nodes) + 1) / (visits + 1))
        return (tree.score_of(node_id) or 0.0) + bonus

    def wants_root(self, tree: Tree) -> bool:
        """Whether the fresh-roots rule picks the base model: fewer than ``min_roots`` stages
        exist and every one of them started from the base model."""
        roomy = self.budget_stages is None or self.budget_stages >= ROOT_STAGES * self.min_roots
        return roomy and len(tree.nodes) < self.min_roots and all(n.parent is None for n in tree.nodes.values())

    def select(self, tree: Tree, stages_left: int | None = None, stages: int | None = None) -> str | None:
        """The node to extend; ``stages_left`` of ``stages`` make the choice budget-aware."""
        self.budget_stages = stages
        if not self.budget_aware:
            stages_left = None
        candidates = self.candidates(tree)
        if stages_left is not None and stages_left < 2 and len(candidates) > 1:
            candidates.remove(None)  # a fresh root could not be extended before the budget ends
        if None in candidates and self.wants_root(tree):
            return None
        share_left = min(1.0, stages_left / stages) if stages_left is not None and stages else 1.0
        values = {c: self.value(tree, c, share_left) for c in candidates}
        top = max(values.values())
        best = [c for c in candidates if math.isclose(values[c], top, abs_tol=1e-12)]
        return random.Random(f"policy:{self.seed}:{len(tree.nodes)}").choice(best)  # same pick after a resume

    def reason(self, tree: Tree, pick: str | None) -> str:
        """Why ``pick`` (what ``select`` returned) is the pick, in one sentence for a reader who may
        choose another parent: the rule that made it, or how its score and bonus compare."""
        if pick is None and not tree.nodes:
            return "the first stage starts from the base model"
        if pick is None and self.wants_root(tree):
            return (f"the session's first {self.min_roots} stages start from the base model, so that the search does "
                    "not bet on one first stage; this says nothing about the base model's score")
        candidates = self.candidates(tree)
        others = [c for c in candidates if c != pick]
        if pick is None and not others:
            return ("no node can be extended by the policy's rules (each is at the depth limit, worse than its "
                    "parent, or has a critical finding)")
        rule = ("UCT: validation score plus an exploration bonus of a few standard errors, larger for a node with "
                "fewer children and shrinking as the budget runs out; nodes worse than their parent or with a "
                "critical finding are skipped")
        leader = max(candidates, key=lambda c: (tree.score_of(c) or 0.0))
        if (tree.score_of(leader) or 0.0) <= (tree.score_of(pick) or 0.0):
            return f"the best score among the nodes it would extend ({rule})"
        return (f"{leader or 'base'} scores higher ({_score(tree, leader)} against {_score(tree, pick)}), but "
                f"{pick or 'base'} has {_children(tree, pick)} against {len(tree.children(leader))}, so its "
                f"exploration bonus puts it first ({rule})")


def _score(tree: Tree, node_id: str | None) -> str:
    stderr = tree.stderr_of(node_id)
    return f"{tree.score_of(node_id) or 0.0:.3f}" + (f" ± {stderr:.3f}" if stderr is not None else "")


def _children(tree: Tree, node_id: str | None) -> str:
    count = len(tree.children(node_id))
    return f"{count} child" + ("" if count == 1 else "ren")
