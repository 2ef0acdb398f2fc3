"""The search tree: nodes are training stages, a root-to-leaf path is a schedule.

A node's parent is another node (its checkpoint is the starting point) or ``None``
for the base model. The tree is rebuilt from MLflow on demand, so it is a plain
in-memory journal with no storage of its own. Everything a node knows has a typed
field here: what the search reads (scores, diagnosis, comparison with the parent) and
what the application records (attempt, a person's decision, the Optuna trial).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal


class Status(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # cut short by a stop; a resume trains it again


@dataclass(frozen=True)
class Finding:
    """One pathology diagnosis named in a stage, with its evidence and a direction to try."""

    name: str
    severity: Literal["info", "warning", "critical"]
    evidence: str = ""
    suggestion: str = ""
    steps: tuple[int, int] = (0, 0)
    values: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        return cls(**{**data, "steps": tuple(data.get("steps", (0, 0)))})

    def to_dict(self) -> dict:
        return asdict(self)


VERDICT_Z = 2.0  # a paired verdict says better or worse beyond this many noise units (autorl/analysis/noise.py)


def verdict_margin(stderr: float, stage_sd: float = 0.0, z: float = VERDICT_Z) -> float:
    """How far a paired difference must go to be better or worse: ``z`` times the evaluation's
    and the training seed's noise combined. The verdict and the prompt that explains it share it."""
    return z * math.hypot(stderr, stage_sd)


def verdict_at(delta: float, margin: float) -> Literal["better", "worse", "tie"]:
    """A paired difference's verdict at ``margin`` (``verdict_margin``): better or worse only past it."""
    return "better" if delta > margin else "worse" if delta < -margin else "tie"


@dataclass(frozen=True)
class Comparison:
    """A child against its parent on the same evaluation items (paired differences)."""

    delta: float
    stderr: float
    n: int
    verdict: Literal["better", "worse", "tie"]
    stage_sd: float | None = None  # the training spread the verdict counted (None: a record from before it was kept)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """A person's decision on a proposal (approve, reject, or edit its values)."""

    action: Literal["approve", "reject", "edit"]
    reason: str = ""
    hyperparameters: dict[str, Any] | None = None  # the edited values, for "edit"
    decided_by: str = "autorl"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Node:
    id: str
    parent: str | None
    depth: int
    hyperparameters: dict[str, Any]
    seed: int
    proposer: str  # the session's strategy name
    commit: str = ""  # the train.py commit the stage ran
    status: Status = Status.PENDING
    reason: str = ""  # why it failed, in one line
    val_score: float | None = None
    val_stderr: float | None = None
    eval_engine: str = ""  # how the evaluator decoded its score (e.g. hf, vllm), when it says
    test_score: float | None = None
    test_stderr: float | None = None
    train_reward: float | None = None
    steps: int = 0
    step_offset: int = 0  # steps of all earlier stages on its path (MLflow's global step axis)
    seconds: float = 0.0
    mlflow_run_id: str = ""
    rationale: str = ""
    expected_effect: str = ""
    edited: bool = False  # its proposal changed train.py
    optuna_trial: int | None = None  # the study's trial number when Optuna chose the values
    attempt: int = 1  # 2 after a stop cut its first attempt short
    decision: Decision | None = None  # set when a person reviewed the proposal
    kept: bool = False  # greedy keep-or-discard: it became the incumbent
    diagnosis: list[Finding] = field(default_factory=list)
    comparison: Comparison | None = None  # against the parent, when both were scored
    frozen_violation: bool = False  # the run changed frozen files
    worker: str = ""  # how its stage started: warm (forked from the session's worker), cold, cold (retry)
    timing: dict[str, Any] = field(default_factory=dict)  # where its wall time went (autorl/stages/timing.py)
    peak_memory_mb: float | None = None  # its training process's peak, as its cgroup measured it
    eval_metrics: dict[str, float] = field(default_factory=dict)  # the evaluator's extra numbers (e.g. format_rate)
    checkpoint: str = ""  # "stored" in its run's artifacts, "deleted" by retention; "" in the session folder (older)
    weight_drift: float | None = None  # ‖θ − θ_start‖ / ‖θ_start‖ of its checkpoint (autorl/analysis/drift.py)
    repeat_of: str | None = None  # the stage it trains again with another seed, to measure noise (search/seed_noise.py)
    planned_steps: int = 0  # the GRPO steps its spec asked for (not stored: the spec.json holds it)

    @property
    def scored(self) -> bool:
        return self.status == Status.SUCCEEDED and self.val_score is not None

    @property
    def path_steps(self) -> int:
        """The GRPO steps its whole path trained from the base model (its own and every earlier stage's)."""
        return self.step_offset + self.steps

    @property
    def healthy(self) -> bool:
        """False when diagnosis says not to extend it: worse than its parent, or a critical finding."""
        worse = self.comparison is not None and self.comparison.verdict == "worse"
        return not worse and not any(f.severity == "critical" for f in self.diagnosis)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data.pop("planned_steps")  # known while its stage runs; spec.json keeps it
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Node":
        """The inverse of ``to_dict`` (a viewer rebuilds the tree a session wrote)."""
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in data.items() if k in known}
        return cls(**{
            **data, "status": Status(data.get("status", "pending")),
            "decision": Decision(**data["decision"]) if data.get("decision") else None,
            "comparison": Comparison(**data["comparison"]) if data.get("comparison") else None,
            "diagnosis": [Finding.from_dict(f) for f in data.get("diagnosis", [])],
        })


class Tree:
    """Nodes in creation order, plus the base model's score."""

    def __init__(self, base_score: float | None = None, base_stderr: float | None = None):
        self.nodes: dict[str, Node] = {}
        self.base_score = base_score
        self.base_stderr = base_stderr

    def add(self, node: Node) -> Node:
        if node.id in self.nodes:
            raise ValueError(f"duplicate node id {node.id}")
        if node.parent is not None and node.parent not in self.nodes:
            raise ValueError(f"node {node.id}: unknown parent {node.parent}")
        self.nodes[node.id] = node
        return node

    def next_id(self) -> str:
        return f"n{len(self.nodes) + 1:03d}"

    def children(self, node_id: str | None) -> list[Node]:
        return [n for n in self.nodes.values() if n.parent == node_id]

    def path(self, node_id: str) -> list[Node]:
        """Nodes from the first stage to ``node_id``: the schedule that produced it."""
        path = []
        current: str | None = node_id
        while current is not None:
            node = self.nodes[current]
            path.append(node)
            current = node.parent
        return path[::-1]

    def score_of(self, node_id: str | None) -> float | None:
        return self.base_score if node_id is None else self.nodes[node_id].val_score

    def stderr_of(self, node_id: str | None) -> float | None:
        return self.base_stderr if node_id is None else self.nodes[node_id].val_stderr

    def typical_stderr(self) -> float:
        """The median standard error of the scores known so far (0 before any): a stand-in
        for a node whose own error is unknown, in the units of this template's evaluator."""
        known = sorted(e for e in [self.base_stderr, *(n.val_stderr for n in self.nodes.values())] if e is not None)
        return known[len(known) // 2] if known else 0.0

    def scored(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.scored]

    def best(self) -> Node | None:
        """The highest-scoring node; ties go to the earlier (cheaper) one."""
        scored = self.scored()
        return max(scored, key=lambda n: (n.val_score, -list(self.nodes).index(n.id))) if scored else None


def may_extend(node: Node, max_depth: int, keep_on_tie: bool = False) -> bool:
    """Whether another stage may follow ``node``: below the depth limit, or past it while its
    path still improves (its own stage beat its parent, paired), up to twice the limit. The
    limit is set before the session starts; a schedule still paying off should not stop at it.

    ``keep_on_tie`` also lets a stage that tied its parent go on: for a proposer that reads the
    pairs and the noise itself (the LLM), a tie at the limit is a question to weigh, not a stop."""
    if node.depth < max_depth:
        return True
    verdict = node.comparison.verdict if node.comparison is not None else None
    goes_on = verdict == "better" or (keep_on_tie and verdict == "tie")
    return goes_on and node.depth < depth_ceiling(max_depth)


def depth_ceiling(max_depth: int) -> int:
    """The deepest stage a path still improving may reach."""
    return 2 * max_depth


def schedule_text(hyperparameters: dict[str, Any], roles: dict[str, str] | None = None) -> str:
    """A compact one-line view of a stage's hyperparameters: those with a GRPO role first,
    by their short label, then the others by name. ``roles`` maps names to roles (default:
    TRL's names, see search.space.TRL_ROLES).

    >>> schedule_text({"learning_rate": 5e-05, "temperature": 1.0, "num_generations": 8, "max_steps": 20})
    'lr=5e-05 T=1 G=8 steps=20'
    >>> schedule_text({"lr_peak": 3e-4, "warmup": 0.1}, roles={"lr_peak": "learning_rate"})
    'lr=0.0003 warmup=0.1'
    """
    from search.space import ROLES, TRL_ROLES

    roles = TRL_ROLES if roles is None else roles
    by_role = {roles[name]: name for name in hyperparameters if name in roles}
    ordered = [(ROLES[role], by_role[role]) for role in ROLES if role in by_role]
    ordered += [(name, name) for name in hyperparameters if name not in roles]
    parts = []
    for label, name in ordered:
        value = hyperparameters[name]
        parts.append(f"{label}={value:.2g}" if isinstance(value, float) else f"{label}={value}")
    return " ".join(parts)


def findings_text(findings: list[Finding]) -> str:
    """Findings as lines a person or an LLM reads."""
    if not findings:
        return "no pathology found"
    return "\n".join(f"- {f.name} ({f.severity}): {f.evidence}; try: {f.suggestion}" for f in findings)
