"""The LLM proposer (strategies ``llm`` and ``hybrid``).

``llm``: the LLM picks the parent, every hyperparameter and an optional edit.
``hybrid``: the LLM picks the parent, the centre values, the numeric parameters to
search and their ranges, and any edit; Optuna's TPE samples inside those ranges.

Every reply is validated locally (schema, parent, space, edit) before it costs
compute. An invalid reply goes back with the exact error, at most ``MAX_REPAIRS``
times; then the proposal is dropped and counted. When the endpoint is down or the LLM
budget is spent, the stage is proposed by Optuna instead, and the session says so.

A request that timed out is not forgotten: the client leaves it running, and the
following prompts say so — still awaited, or arrived after N s and discarded (with what
it proposed), or never came — and which stage Optuna proposed in its place, until a
prompt that said how it ended has been answered.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import optuna
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from search.context import ContextBuilder, PromptView, prompt, values_text
from search.edits import EditBlock, apply_edit
from search.errors import ProposalError
from search.llm import LLMClient, LLMUnavailable, TimedOut
from search.proposers.base import Proposal, ProposalDropped
from search.proposers.tpe import TpeProposer
from search.space import SearchSpace
from search.study import fail_orphan_trials, fail_trial, record_node, reseed
from search.tree import Node, Tree

MAX_REPAIRS = 2
MAX_CONSECUTIVE_DROPS = 3


class SearchRange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    low: float
    high: float


class LLMReply(BaseModel):
    """The JSON object the ``llm`` strategy's LLM must return."""

    model_config = ConfigDict(extra="forbid")

    parent: str = Field(description="Node id to continue from, or 'base'.")
    hyperparameters: dict[str, Any]
    edit: list[EditBlock] = Field(default_factory=list)
    rationale: str
    expected_effect: str = ""


class HybridReply(LLMReply):
    """The ``hybrid`` strategy's reply: also the ranges Optuna samples inside."""

    search: list[SearchRange] = Field(default_factory=list)


def reply_schema(space: SearchSpace, hybrid: bool = True) -> dict:
    """JSON schema of the reply for this space and strategy (strict: every key required,
    no extras); only ``hybrid`` has ``search``."""
    def value_schema(p):
        return {"enum": p.choices} if p.type == "categorical" else {"type": "integer" if p.type == "int" else "number"}

    numeric = [p.name for p in space.params.values() if p.type != "categorical"]
    string = {"type": "string"}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["parent", "hyperparameters", "search", "edit", "rationale", "expected_effect"],
        "properties": {
            "parent": string,
            "hyperparameters": {
                "type": "object", "additionalProperties": False, "required": list(space.params),
                "properties": {name: value_schema(p) for name, p in space.params.items()},
            },
            "search": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "low", "high"],
                "properties": {"name": {"enum": numeric}, "low": {"type": "number"}, "high": {"type": "number"}}}},
            "edit": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["file", "search", "replace"],
                "properties": {"file": string, "search": string, "replace": string}}},
            "rationale": string,
            "expected_effect": string,
        },
    }
    if not hybrid:
        schema["required"].remove("search")
        del schema["properties"]["search"]
    return schema


def parse_json_object(text: str) -> dict:
    """The JSON object in a reply, as local servers write them: inside a Markdown code fence
    or between sentences, with raw newlines inside strings (``strict=False``)."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    candidate = (fenced.group(1) if fenced else text).strip()
    if not candidate.startswith("{") and "{" in candidate:
        candidate = candidate[candidate.index("{"): candidate.rindex("}") + 1 if "}" in candidate else None]
    try:
        value = json.loads(candidate, strict=False)
    except json.JSONDecodeError as exc:
        raise ProposalError(f"the reply is not valid JSON ({exc.msg} at character {exc.pos})") from exc
    if not isinstance(value, dict):
        raise ProposalError("the reply must be one JSON object")
    return value


@dataclass
class LateNote:
    """A request of this proposer that timed out, as the prompts tell it: what came of it, and what
    was proposed in its place (``instead``: the fallback's rationale, ``node``: the id its stage got)."""

    record: TimedOut
    instead: str | None = None  # None: the request was sent again and that reply was used
    node: str = ""
    said: bool = False  # a prompt told how it ended, and was answered
    told: bool = False  # the session was told how it ended

    def request(self) -> str:
        match = re.fullmatch(r"a(\d+)\.r(\d+)", self.record.key)
        if not match:
            return f"request {self.record.key}"
        return f"request #{match.group(1)}" + (f" (repair {match.group(2)})" if match.group(2) != "0" else "")

    def replaced_by(self, tree: Tree) -> str:
        if self.instead is None:
            return "it was sent again and that reply was used"
        node = tree.nodes.get(self.node)
        if node is not None and node.rationale == self.instead:
            return f"stage {node.id} was proposed by Optuna (TPE) instead"
        return "Optuna (TPE) proposed instead, and that proposal was not run"

    def text(self, tree: Tree) -> str:
        record = self.record
        if record.arrived_s is not None:
            return (f"Your reply to {self.request()} arrived after {record.arrived_s:.1f} s, past the "
                    f"{record.timeout_s:g} s timeout, and was discarded ({discarded(record.content)}); "
                    f"{self.replaced_by(tree)}.")
        if record.failed:
            return f"Your reply to {self.request()} never came ({record.failed}); {self.replaced_by(tree)}."
        return (f"Your reply to {self.request()} did not come within the {record.timeout_s:g} s timeout; "
                f"{self.replaced_by(tree)}. If it still comes, it is discarded.")


def discarded(content: str) -> str:
    """What a discarded late reply proposed, in a few words."""
    try:
        value = parse_json_object(content)
    except ProposalError:
        return f"{len(content)} characters, not a JSON object"
    values = value.get("hyperparameters")
    text = f"it proposed parent {value.get('parent', '?')}"
    if isinstance(values, dict):
        text += f" with {values_text(values)}"
    return text[:300] + ("…" if len(text) > 300 else "")


class ScriptSource(Protocol):
    """Reads ``train.py`` as of a commit (the session workspace is one)."""

    root_commit: str

    def train_script_at(self, commit: str) -> str: ...


class LLMProposer:
    chooses_parent = False  # it may pick another parent than the policy's suggestion, inside the tree

    def __init__(
        self,
        space: SearchSpace,
        client: LLMClient,
        context: ContextBuilder,
        study: optuna.Study,
        workspace: ScriptSource,
        hybrid: bool,
        budget_text: Callable[[], str] = lambda: "",
        notify: Callable[[str], None] = lambda text: None,
        seed: int = 0,
    ):
        self.space = space
        self.client = client
        self.context = context
        self.study = study
        self.workspace = workspace
        self.hybrid = hybrid
        self.name = "hybrid" if hybrid else "llm"
        self.notify = notify
        self.fallback = TpeProposer(space, study, start_with_defaults=False, seed=seed)  # also samples hybrid's ranges
        self.schema = reply_schema(space, hybrid)
        self.reply_model = HybridReply if hybrid else LLMReply
        self.feedback: list[str] = []
        self.dropped = 0
        self.consecutive_drops = 0
        self.attempts = 0
        self.budget_text = budget_text
        self._told_fallback: set[str] = set()
        self.late: list[LateNote] = []  # requests that timed out, until a prompt has said how each ended

    # -- proposing ------------------------------------------------------------------------

    def propose(self, tree: Tree, parent: str | None) -> Proposal:
        self.tell_late(tree)
        spent = self.client.spent()
        if spent or self.consecutive_drops >= MAX_CONSECUTIVE_DROPS:
            why = spent or f"{self.consecutive_drops} proposals in a row were invalid"
            self.consecutive_drops = 0
            return self._fallback(tree, parent, why)
        shown = [note for note in self.late if not note.said]
        ended = [note for note in shown if note.record.ended]  # said as they ended once this prompt is answered
        view = PromptView(suggested=parent, expandable=self.expandable(tree), budget=self.budget_text(),
                          feedback=self.feedback, timeouts=[note.text(tree) for note in shown])
        messages = self.context.messages(tree, view)
        self.attempts += 1
        for repair in range(MAX_REPAIRS + 1):
            known = len(self.client.timed_out)
            try:
                reply = self.client.complete(messages, self.schema, step_key=f"a{self.attempts}.r{repair}")
            except LLMUnavailable as exc:
                proposal = self._fallback(tree, parent, f"LLM unavailable ({exc})")
                self.note_timeouts(known, instead=proposal.rationale, node=tree.next_id())
                return proposal
            self.note_timeouts(known)  # an attempt timed out, and another was answered
            for note in ended:
                note.said = True
            messages = messages + [{"role": "assistant", "content": reply["content"]}]
            try:
                proposal = self.validate(reply["content"], tree, truncated=reply.get("finish_reason") == "length")
            except ProposalError as exc:
                messages.append({"role": "user", "content": prompt("repair", error=str(exc)).strip()})
                error = str(exc)
                continue
            self.consecutive_drops = 0
            proposal.transcript = messages
            return proposal
        self.dropped += 1
        self.consecutive_drops += 1
        self.feedback.append(f"a proposal was dropped after {MAX_REPAIRS} repairs: {error}")
        raise ProposalDropped(f"LLM proposal dropped after {MAX_REPAIRS} repairs: {error}")

    def _fallback(self, tree: Tree, parent: str | None, why: str) -> Proposal:
        if why not in self._told_fallback:
            self.notify(f"{why}: proposing with optuna instead")
            self._told_fallback.add(why)
        proposal = self.fallback.propose(tree, parent)
        proposal.rationale = f"optuna fallback: {why}"
        return proposal

    def note_timeouts(self, known: int, instead: str | None = None, node: str = "") -> None:
        """Keep the attempts the last request gave up (the client's records from ``known`` on)."""
        self.late += [LateNote(record, instead, node) for record in self.client.timed_out[known:]]

    def tell_late(self, tree: Tree) -> None:
        """Say in the session how each timed-out request ended, once; forget those the LLM was told of."""
        self.late = [note for note in self.late if not note.said]
        for note in self.late:
            if note.record.ended and not note.told:
                note.told = True
                self.notify("LLM: " + note.text(tree).replace("Your reply", "the reply", 1))

    def source_of(self, tree: Tree, node_id: str | None) -> tuple[str, str]:
        """The train.py a child of ``node_id`` starts from, and its commit."""
        commit = tree.nodes[node_id].commit if node_id else self.workspace.root_commit
        return self.workspace.train_script_at(commit), commit

    def expandable(self, tree: Tree) -> list[str | None]:
        return [None] + [n.id for n in tree.scored() if self.context.extendable(n)]  # the rule its prompt states

    def parents(self, tree: Tree) -> set[str]:
        """Any node it may extend: the model may pick another parent than the policy's."""
        return {node_id for node_id in self.expandable(tree) if node_id is not None}

    # -- validation -----------------------------------------------------------------------

    def validate(self, content: str, tree: Tree, truncated: bool = False) -> Proposal:
        """Turn a reply into a Proposal, or raise ProposalError with a message for the LLM."""
        if truncated:
            raise ProposalError("the reply was cut off (length limit); reply with a shorter JSON object")
        try:
            reply = self.reply_model.model_validate(parse_json_object(content))
        except ValidationError as exc:
            details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()[:5])
            raise ProposalError(f"the reply does not match the schema: {details}") from exc
        parent = self.check_parent(reply.parent, tree)
        values = self.space.check(reply.hyperparameters)
        train_py = None
        if reply.edit:
            source, _ = self.source_of(tree, parent)
            train_py = apply_edit(source, reply.edit)
        trial_number = None
        if ranges := getattr(reply, "search", []):  # hybrid only
            trial_number, sampled = self.sample_ranges(ranges, parent, tree)
            values = self.space.check({**values, **sampled})
        return Proposal(parent=parent, hyperparameters=values, rationale=reply.rationale,
                        expected_effect=reply.expected_effect, edit=reply.edit, train_py=train_py,
                        optuna_trial=trial_number)

    def check_parent(self, name: str, tree: Tree) -> str | None:
        if name.strip().lower() in ("base", "", "none", "null", "root"):
            return None
        expandable = self.expandable(tree)
        if name not in expandable:
            choices = ", ".join(e or "base" for e in expandable)
            why = ("is not in the tree" if name not in tree.nodes
                   else "cannot be extended (failed or at the depth limit)")
            raise ProposalError(f"parent {name!r} {why}; choose one of: {choices}")
        return name

    def sample_ranges(self, ranges: list[SearchRange], parent: str | None, tree: Tree) -> tuple[int, dict]:
        """Let TPE pick values inside the LLM's ranges (clipped to the space)."""
        distributions = {}
        for item in ranges:
            param = self.space.params.get(item.name)
            if param is None or param.type == "categorical":
                raise ProposalError(f"search range for {item.name!r}: "
                                    "only numeric parameters of the space can be searched")
            low, high = max(item.low, param.low), min(item.high, param.high)
            if not low < high:
                raise ProposalError(f"search range for {item.name!r} [{item.low:g}, {item.high:g}] is empty inside "
                                    f"the space bounds [{param.low:g}, {param.high:g}]")
            distributions[item.name] = param.distribution(low, high)
        reseed(self.study, self.fallback.seed, len(tree.nodes))
        trial = self.study.ask(distributions)
        trial.set_user_attr("parent", parent or "base")
        trial.set_user_attr("depth", 1 if parent is None else tree.nodes[parent].depth + 1)
        return trial.number, trial.params

    # -- learning -------------------------------------------------------------------------

    def observe(self, tree: Tree, node: Node) -> None:
        """A stage has run: what was said about earlier proposals no longer applies."""
        record_node(self.study, self.space, tree, node)
        self.feedback.clear()

    def withdraw(self, proposal: Proposal, reason: str | None = None) -> None:
        fail_trial(self.study, proposal.optuna_trial)
        if reason is not None:
            self.feedback.append(f"a person rejected the proposal from {proposal.parent or 'base'} "
                                 f"({json.dumps(proposal.hyperparameters, sort_keys=True)}): {reason}")

    def withdraw_duplicate(self, proposal: Proposal, twin: Node, tree: Tree) -> None:
        fail_trial(self.study, proposal.optuna_trial)
        self.feedback.append(f"your proposal from {proposal.parent or 'base'} "
                             f"({json.dumps(proposal.hyperparameters, sort_keys=True)}) "
                             f"nearly repeats {twin.id}, which "
                             "already ran from there with the same train.py; it was not run. Propose something that "
                             "differs (other values, another parent, or an edit)")

    def withdraw_failure(self, proposal: Proposal, evidence: str) -> None:
        fail_trial(self.study, proposal.optuna_trial)
        self.feedback.append(f"your proposal from {proposal.parent or 'base'} "
                             f"({json.dumps(proposal.hyperparameters, sort_keys=True)}) "
                             "was not run: it repeats a known "
                             f"failure. {evidence}. Propose something outside that region")

    def restore(self, tree: Tree, session_metrics: dict[str, float]) -> None:
        fail_orphan_trials(self.study, tree, set(self.space.params))
        self.client.usage.restore(session_metrics)
        self.dropped = int(session_metrics.get("llm_dropped_proposals", 0))

    def usage(self) -> dict[str, float]:
        return self.client.usage.as_metrics() | {"llm_dropped_proposals": self.dropped}
