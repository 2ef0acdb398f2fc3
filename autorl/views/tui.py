"""The interactive session view (Textual): watch the tree grow, and approve, reject or
edit each proposal before it costs compute.

The controller runs in a worker thread. It is built with a ``TuiObserver`` as its
observer; the app connects to that observer when it mounts, and from then on the
controller's hooks arrive as messages on the app's thread. The controller's thread owns
the tree, so the observer copies what the app shows there, at each event (a
``TreeSnapshot``, the parent of a proposal, the budget line, the diff), and the app
renders only from the latest copies it received: it never reads the live tree, which the
controller goes on changing meanwhile. Decisions go back through the controller's
``Gate``. One factory, ``make_app``, serves the CLI and the tests.

Keys: ``a`` approve, ``r`` reject with a reason, ``e`` edit the values, ``p``
pause/resume, ``q`` quit — which stops the session cleanly (the running stage is
killed and marked interrupted; ``autorl resume`` continues it). Ctrl-C and Ctrl-Q do
what ``q`` does, and so do SIGINT and SIGTERM (``cli.drive_tui`` calls
``SessionApp.stop_from_signal``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any, Callable

from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Footer, Header, Input, RichLog, Sparkline, Static
from textual.widgets import Tree as TreeWidget
from textual.worker import get_current_worker

from autorl.loop.channel import Channel
from autorl.loop.controller import Controller
from autorl.loop.observer import Observer, Observers
from search.errors import ProposalError
from search.proposers import Proposal
from search.space import Param, SearchSpace
from search.tree import Decision, Node, Tree, findings_text

CURVES = {"reward": "reward", "entropy": "entropy", "length": "completions/mean_length"}


@dataclasses.dataclass(frozen=True)
class NodeRow:
    """One node as the TUI shows it."""

    id: str
    parent: str | None
    status: str
    val_score: float | None
    val_stderr: float | None
    scored: bool
    proposer: str


@dataclasses.dataclass(frozen=True)
class TreeSnapshot:
    """The tree as it stood at one event, copied on the thread that owns it (the
    controller's, or the follower of an attached session's channel). The app renders only
    from these: a later change to the live tree shows with the next snapshot, never
    half-made, and the app never iterates a dict another thread is growing."""

    base_score: float | None = None
    base_stderr: float | None = None
    nodes: tuple[NodeRow, ...] = ()
    best_path: frozenset[str] = frozenset()
    budget: str = ""

    @classmethod
    def of(cls, tree: Tree, budget: str = "") -> "TreeSnapshot":
        """Call on the thread that owns ``tree``."""
        best = tree.best()
        return cls(tree.base_score, tree.base_stderr,
                   tuple(NodeRow(n.id, n.parent, n.status.value, n.val_score, n.val_stderr, n.scored, n.proposer)
                         for n in tree.nodes.values()),
                   frozenset(n.id for n in tree.path(best.id)) if best else frozenset(), budget)


def copy_node(node: Node | None) -> Node | None:
    """A node's copy, made on the thread that owns it, for the app to read on its own."""
    return Node.from_dict(node.to_dict()) if node is not None else None


class TreeChanged(Message):
    def __init__(self, snapshot: TreeSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class StepLogged(Message):
    def __init__(self, node_id: str, record: dict) -> None:
        super().__init__()
        self.node_id, self.record = node_id, record


class Note(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ProposalPending(Message):
    """A proposal waiting for a decision: copies of it and its parent, with the diff of
    ``train.py`` and the proposer's name, made where the proposal was made."""

    def __init__(self, proposal: Proposal, parent: Node | None, key: str | None = None,
                 diff: str = "", proposer: str = "") -> None:
        super().__init__()
        self.proposal, self.parent = proposal, parent
        self.key, self.diff, self.proposer = key, diff, proposer


class PhaseChanged(Message):
    def __init__(self, node_id: str, phase: str, budget: str = "") -> None:
        super().__init__()
        self.node_id, self.phase, self.budget = node_id, phase, budget


class SessionEnded(Message):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__()
        self.status, self.reason = status, reason


class TuiObserver(Observer):
    """The controller's hooks, forwarded to the app's thread as messages (held until
    the app connects, so nothing the controller says before the first frame is lost).

    The hooks run on the controller's thread, which owns the tree: each message carries
    copies made here (``TreeSnapshot``, the proposal and its parent, the budget line),
    never the live objects."""

    def __init__(self):
        self.app: SessionApp | None = None
        self.held: list[Message] = []
        self.budget = None  # the controller's Budget, read only in the hooks
        self.diff: Callable[[Proposal, Node | None], str] = lambda proposal, parent: ""
        self.proposer_name: Callable[[], str] = lambda: ""

    def watch(self, controller: Controller) -> None:
        """Where the hooks read the diff and the proposer's name (make_app sets it)."""
        self.diff = controller.review.diff
        self.proposer_name = lambda: controller.parts.proposer.name

    def budget_text(self) -> str:
        return self.budget.describe() if self.budget is not None else ""

    def snapshot(self, tree: Tree) -> TreeChanged:
        return TreeChanged(TreeSnapshot.of(tree, self.budget_text()))

    def connect(self, app: "SessionApp") -> None:
        self.app = app
        for message in self.held:
            app.post_message(message)
        self.held.clear()

    def post(self, message: Message) -> None:
        if self.app is None:
            self.held.append(message)
        else:
            self.app.call_from_thread(self.app.post_message, message)

    def session_started(self, name: str, tree: Tree, budget) -> None:
        self.budget = budget
        self.post(self.snapshot(tree))

    def proposal_pending(self, proposal: Proposal, parent: Node | None, key: str | None = None) -> None:
        self.post(ProposalPending(proposal.model_copy(deep=True), copy_node(parent), key=key,
                                  diff=self.diff(proposal, parent), proposer=self.proposer_name()))

    def message(self, text: str) -> None:
        self.post(Note(text))

    def stage_started(self, node: Node, tree: Tree) -> None:
        self.post(self.snapshot(tree))

    def stage_phase(self, node: Node, phase: str) -> None:
        self.post(PhaseChanged(node.id, phase, self.budget_text()))

    def step(self, node: Node, record: dict) -> None:
        self.post(StepLogged(node.id, dict(record)))

    def stage_finished(self, node: Node, tree: Tree) -> None:
        self.post(self.snapshot(tree))

    def session_finished(self, tree: Tree, status: str, reason: str) -> None:
        self.post(self.snapshot(tree))
        self.post(SessionEnded(status, reason))


class LocalLink:
    """The session runs in this process: the TUI drives its controller (through its gate;
    what it shows comes from the observer's copies, never from the controller's tree)."""

    attached = False

    def __init__(self, controller: Controller):
        self.controller = controller
        config = controller.config
        self.name, self.strategy, self.mode = config.name, config.strategy, controller.gate.mode
        self.stopping = False  # a stop was asked for from this process (q, Ctrl-C, a signal)

    def first_snapshot(self) -> TreeSnapshot:
        return TreeSnapshot()  # the controller's first hook sends the real one

    def check(self, values: dict[str, Any]) -> dict[str, Any]:
        return self.controller.template.space.check(values)

    def decide(self, message: ProposalPending, decision: Decision) -> bool:
        return self.controller.gate.decide(decision, message.key)

    def still_pending(self, message: ProposalPending) -> bool:
        return self.controller.gate.pending_key == message.key

    def toggle_pause(self) -> bool:
        """Pause or resume; True when it is paused now."""
        gate = self.controller.gate
        paused = not gate.running.is_set() or (gate.channel is not None and gate.channel.paused)
        gate.resume() if paused else gate.pause()
        return not paused

    def stop(self, pending: ProposalPending | None) -> None:
        """The controller sees the request at its next check, a pending proposal included."""
        self.stopping = True  # first: a signal handler that interrupts what follows leaves the event to it
        gate = self.controller.gate
        gate.stop_requested.set()
        gate.resume()

    def stop_at_once(self) -> None:
        """The stop request alone, from a signal handler on the app's thread: unless ``stop``
        has begun there (it may hold the event's lock right now, and would deadlock us)."""
        if not self.stopping:
            self.stopping = True
            self.controller.gate.stop_requested.set()


class AttachedLink:
    """The session runs in another process: the TUI follows its channel and sends decisions there."""

    attached = True

    def __init__(self, channel: Channel, user: str):
        self.channel, self.user = channel, user
        info = channel.session_info()
        self.name, self.strategy, self.mode = info.get("name", "?"), info.get("strategy", "?"), info.get("approve", "?")
        self.space = SearchSpace([Param(**p) for p in info.get("space", [])])
        self.budget = ""  # written by the follower thread only

    def first_snapshot(self) -> TreeSnapshot:
        return TreeSnapshot.of(self.channel.tree())  # a tree of its own, read from the file

    def check(self, values: dict[str, Any]) -> dict[str, Any]:
        return self.space.check(values)

    def decide(self, message: ProposalPending, decision: Decision) -> bool:
        if self.pending_message(message.key) is None:
            return False  # decided, or no longer proposed, since it was shown
        return self.channel.post_decision(message.key, dataclasses.replace(decision, decided_by=self.user))

    def still_pending(self, message: ProposalPending) -> bool:
        return self.pending_message(message.key) is not None

    def toggle_pause(self) -> bool:
        self.channel.set_paused(not self.channel.paused)
        return self.channel.paused

    def stop(self, pending: ProposalPending | None) -> None:
        """Leaving an attached TUI leaves the session running."""

    def stop_at_once(self) -> None:
        """Nothing to stop here (see ``stop``)."""

    def pending_message(self, key: str | None = None) -> ProposalPending | None:
        """The proposal waiting now (``key``: only if it is that one), unless it was decided."""
        pending = self.channel.pending()
        if not pending or (key is not None and pending["key"] != key) or self.channel.decision_for(pending["key"]) \
                or self.channel.acted_on(pending["key"]):
            return None
        parent = Node.from_dict(pending["parent"]) if pending.get("parent") else None
        return ProposalPending(Proposal(**pending["proposal"]), parent, key=pending["key"],
                               diff=pending.get("diff") or "", proposer=pending.get("proposer", ""))

    def snapshot(self) -> TreeChanged:
        return TreeChanged(TreeSnapshot.of(self.channel.tree(), self.budget))

    def messages(self, event: dict) -> list[Message]:
        """What one channel event means to the app (on the follower's thread)."""
        if "budget" in event:
            self.budget = event["budget"]
        kind = event.get("kind")
        if kind in ("tree", "session_started"):
            return [self.snapshot()]
        if kind == "phase":
            return [PhaseChanged(event["node"], event["phase"], self.budget)]
        if kind == "step":
            return [StepLogged(event["node"], event.get("record", {}))]
        if kind == "note":
            return [Note(escape(str(event.get("text", ""))))]
        if kind == "proposal_pending":
            return [m for m in [self.pending_message(event.get("key"))] if m]
        if kind == "session_finished":
            return [self.snapshot(), SessionEnded(event.get("status", "?"), event.get("reason", ""))]
        return []


def parse_values(text: str, current: dict[str, Any]) -> dict[str, Any]:
    """``name=value`` pairs (JSON values where they parse) laid over ``current``.

    >>> parse_values("learning_rate=1e-4 loss_type=grpo", {"learning_rate": 5e-5, "loss_type": "dapo"})
    {'learning_rate': 0.0001, 'loss_type': 'grpo'}
    """
    values = dict(current)
    for pair in text.split():
        name, sep, raw = pair.partition("=")
        if not sep:
            raise ProposalError(f"{pair!r} is not name=value")
        try:
            values[name] = json.loads(raw)
        except json.JSONDecodeError:
            values[name] = raw
    return values


def proposal_view(proposal: Proposal, parent: Node | None, train_py_diff: str, proposer: str = "") -> list:
    table = Table("hyperparameter", "parent", "proposed", box=None)
    before = parent.hyperparameters if parent else {}
    for name, value in proposal.hyperparameters.items():
        old = before.get(name, "—")
        changed = parent is not None and old != value
        table.add_row(name, _short(old), f"[bold yellow]{_short(value)}[/]" if changed else _short(value))
    diagnosis = findings_text(parent.diagnosis) if parent else "base model: no diagnosis"
    parts = [f"[b]from {proposal.parent or 'base'}[/]  proposer: {proposer}",
             f"[i]{proposal.rationale or 'no rationale'}[/]", table, f"[b]parent's diagnosis[/]\n{diagnosis}"]
    if train_py_diff:
        parts.append(Syntax(train_py_diff, "diff", theme="ansi_dark", word_wrap=True))
    return parts


class SessionApp(App):
    """One research session, live: run here (``LocalLink``) or attached (``AttachedLink``)."""

    CSS = """
    #nodes { width: 45%; border: round $primary; }
    #right { width: 55%; }
    #proposal { height: 1fr; border: round $accent; padding: 0 1; }
    #curves { height: auto; border: round $primary; padding: 0 1; }
    Sparkline { height: 2; }
    #log { height: 8; border: round $primary; }
    #input { display: none; }
    #input.visible { display: block; }
    """
    BINDINGS = [
        Binding("a", "approve", "approve"),
        Binding("r", "reject", "reject…"),
        Binding("e", "edit", "edit values…"),
        Binding("p", "pause", "pause/resume"),
        Binding("q", "quit_session", "quit (stops cleanly)"),
        Binding("escape", "cancel_input", "cancel", show=False),
        # Textual's own ctrl+q would leave the app with the controller still running in its
        # worker thread (and the process waiting for it); both keys stop cleanly instead
        Binding("ctrl+q", "quit_session", show=False, priority=True),
        Binding("ctrl+c", "quit_session", show=False, priority=True),
    ]

    def __init__(self, link: LocalLink | AttachedLink, observer: TuiObserver | None = None,
                 run_controller: bool = True):
        super().__init__()
        self.link = link
        self.observer = observer
        self.run_controller = run_controller and not link.attached
        self.pending: ProposalPending | None = None
        self.input_mode: str | None = None
        self.curves: dict[str, list[float]] = {name: [] for name in CURVES}
        self.ended: SessionEnded | None = None
        self.leaving = False
        self.snapshot = TreeSnapshot()  # the latest the app was sent: all it shows of the tree
        self.loop: asyncio.AbstractEventLoop | None = None
        self.title = f"autorl · {link.name}" + (" (attached)" if link.attached else "")
        self.sub_title = f"{link.strategy} · approve {link.mode}"

    @property
    def controller(self) -> Controller:
        return self.link.controller

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield TreeWidget("base", id="nodes")
            with Vertical(id="right"):
                yield Static("no proposal waiting", id="proposal")
                with Vertical(id="curves"):
                    yield Static("", id="budget")
                    for name in CURVES:
                        yield Static(name, classes="label")
                        yield Sparkline([], id=f"spark-{name}")
        yield Input(id="input")
        yield RichLog(id="log", wrap=True, markup=True)
        yield Footer()

    def on_mount(self) -> None:
        for widget in (self.query_one("#nodes"), self.query_one("#log"), self.query_one("#input")):
            widget.can_focus = False  # keys go to the app's bindings unless the input is open
        self.set_focus(None)
        self.loop = asyncio.get_running_loop()
        self.show_tree(self.link.first_snapshot())
        if self.link.attached:
            self.follow_channel()
            return
        self.observer.connect(self)
        if self.run_controller:
            self.run_session()

    def on_unmount(self) -> None:
        self.leaving = True  # the channel's follower thread ends with the app

    @work(thread=True, exclusive=True)
    def run_session(self) -> None:
        try:
            self.controller.run()
        except KeyboardInterrupt:
            pass  # finish() has marked the session stopped
        except Exception as exc:  # the controller has already recorded the failure
            self.call_from_thread(self.post_message, Note(f"[red]session failed:[/] {exc}"))

    @work(thread=True, exclusive=True)
    def follow_channel(self) -> None:
        """Replay the attached session's events from its start, then follow them live."""
        worker = get_current_worker()
        for event in self.link.channel.follow(stop=lambda: self.leaving or worker.is_cancelled):
            for message in self.link.messages(event):
                self.call_from_thread(self.post_message, message)

    # -- reacting to the session ---------------------------------------------------------------

    def on_tree_changed(self, message: TreeChanged) -> None:
        self.show_tree(message.snapshot)
        self.drop_if_decided_elsewhere()
        self.query_one("#budget", Static).update(message.snapshot.budget)

    def on_phase_changed(self, message: PhaseChanged) -> None:
        self.query_one("#budget", Static).update(f"{message.budget}  |  {message.node_id} {message.phase}")

    def on_step_logged(self, message: StepLogged) -> None:
        for name, key in CURVES.items():
            value = message.record.get(key)
            if isinstance(value, (int, float)):
                self.curves[name].append(float(value))
                self.query_one(f"#spark-{name}", Sparkline).data = self.curves[name][-60:]

    def on_note(self, message: Note) -> None:
        self.query_one("#log", RichLog).write(message.text)
        self.drop_if_decided_elsewhere()

    def on_proposal_pending(self, message: ProposalPending) -> None:
        self.pending = message
        view = proposal_view(message.proposal, message.parent, message.diff, message.proposer)
        self.query_one("#proposal", Static).update(_group(view))
        self.bell()

    def drop_if_decided_elsewhere(self) -> None:
        """Another viewer (or the session's own TUI) decided the proposal shown here."""
        if self.pending is not None and not self.link.still_pending(self.pending):
            self.pending = None
            self.query_one("#proposal", Static).update("decided elsewhere — waiting for the next proposal")

    def on_session_ended(self, message: SessionEnded) -> None:
        self.ended = message
        self.pending = None
        self.query_one("#log", RichLog).write(f"[b]session {message.status}[/]: {message.reason}  (q to leave)")
        if not self.link.attached and self.controller.gate.stop_requested.is_set():
            self.exit()

    def show_tree(self, snapshot: TreeSnapshot) -> None:
        """Draw the tree from a snapshot (never from the live tree: see TreeSnapshot)."""
        self.snapshot = snapshot
        widget = self.query_one("#nodes", TreeWidget)
        widget.clear()
        base = f"{snapshot.base_score:.3f}" if snapshot.base_score is not None else "…"
        widget.root.set_label(f"base {base}")
        branches = {None: widget.root}
        for node in snapshot.nodes:
            stderr = f"{node.val_stderr:.3f}" if node.val_stderr is not None else "?"
            score = f"{node.val_score:.3f} ± {stderr}" if node.scored else node.status
            style = "bold green" if node.id in snapshot.best_path else ""
            label = f"[{style}]{node.id}[/] {score} [dim]{node.proposer}[/]" if style else \
                f"{node.id} {score} [dim]{node.proposer}[/]"
            branches[node.id] = branches.get(node.parent, widget.root).add(label, expand=True)
        widget.root.expand_all()

    # -- actions ----------------------------------------------------------------------------

    def decide(self, decision: Decision) -> None:
        pending, self.pending = self.pending, None
        if self.link.decide(pending, decision):
            self.query_one("#proposal", Static).update(f"{decision.action}d — waiting for the next proposal")
        else:
            self.query_one("#proposal", Static).update("decided elsewhere first — waiting for the next proposal")

    def action_approve(self) -> None:
        if self.pending:
            self.decide(Decision(action="approve"))

    def action_reject(self) -> None:
        if self.pending:
            self.ask("reject", "why? (goes back to the proposer)", "")

    def action_edit(self) -> None:
        if self.pending:
            values = " ".join(f"{k}={json.dumps(v)}" for k, v in self.pending.proposal.hyperparameters.items())
            self.ask("edit", "name=value … (Enter to run with these values)", values)

    def ask(self, mode: str, placeholder: str, value: str) -> None:
        self.input_mode = mode
        field = self.query_one("#input", Input)
        field.placeholder, field.value = placeholder, value
        field.add_class("visible")
        field.can_focus = True
        field.focus()

    def action_cancel_input(self) -> None:
        self.input_mode = None
        field = self.query_one("#input", Input)
        field.remove_class("visible")
        field.can_focus = False
        self.set_focus(None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not self.pending or self.input_mode is None:
            return
        if self.input_mode == "reject":
            self.decide(Decision(action="reject", reason=event.value.strip()))
        else:
            try:
                values = self.link.check(parse_values(event.value, self.pending.proposal.hyperparameters))
            except ProposalError as exc:
                self.query_one("#log", RichLog).write(f"[red]edit rejected:[/] {escape(str(exc))}")
                return
            self.decide(Decision(action="edit", hyperparameters=values, reason="values edited"))
        self.action_cancel_input()

    def action_pause(self) -> None:
        if self.link.toggle_pause():
            self.query_one("#log", RichLog).write("paused: no new stage starts until you press p again")
        else:
            self.query_one("#log", RichLog).write("resumed")

    def action_quit_session(self) -> None:
        """Stop the session cleanly, then leave once the controller has recorded the stop
        (an attached TUI just leaves: the session goes on without it)."""
        if self.ended or not self.run_controller:
            self.leaving = True
            self.exit()
            return
        self.link.stop(self.pending)
        try:
            self.query_one("#log", RichLog).write("stopping: the running stage is killed and marked interrupted")
        except NoMatches:  # a signal came while the app was closing
            pass

    def stop_from_signal(self) -> None:
        """SIGINT or SIGTERM (``cli.drive_tui`` installs the handler that calls this): stop the
        session as ``q`` does; the app leaves once the controller has recorded the stop.

        Safe inside a signal handler, which Python runs on the app's thread wherever it was:
        the gate's stop request is set at once (the controller checks it, even while the
        app's loop is busy), and the rest (``q``'s work, or leaving a session that already
        ended) is handed to the app's loop rather than done here. Nothing is raised inside
        Textual's loop."""
        self.link.stop_at_once()
        loop = self.loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self.action_quit_session)
            except RuntimeError:  # the loop has closed: the app has ended
                pass


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _group(parts: list):
    from rich.console import Group

    return Group(*parts)


def make_app(controller: Controller, run_controller: bool = True) -> SessionApp:
    """The TUI for ``controller``, which must have been built with a ``TuiObserver``;
    the CLI and the tests both build it here."""
    observer = controller.observer
    if isinstance(observer, Observers):
        observer = observer.find(TuiObserver)
    if not isinstance(observer, TuiObserver):
        raise TypeError("build the controller with observer=TuiObserver() to drive it from the TUI")
    observer.watch(controller)
    return SessionApp(LocalLink(controller), observer, run_controller)


class AttachedApp(SessionApp):
    """The TUI attached to another process's session: leaving it leaves the session running."""

    BINDINGS = [*(b for b in SessionApp.BINDINGS if b.key != "q"),
                Binding("q", "quit_session", "leave (the session goes on)")]


def attach_app(session_dir, user: str) -> SessionApp:
    """A TUI attached to the session another process runs in ``session_dir``."""
    return AttachedApp(AttachedLink(Channel(session_dir), user))
