"""The terminal view of a running session (rich): the tree so far and the live stage."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from autorl.loop.budget import Budget
from autorl.loop.observer import Observer
from search.tree import Node, Status, Tree, schedule_text

STATUS_STYLE = {"succeeded": "green", "failed": "red", "running": "yellow", "pending": "dim"}
STATUS_SHORT = {"succeeded": "ok", "failed": "failed", "running": "running", "pending": "pending",
                "interrupted": "stopped"}


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def nodes_table(tree: Tree, title: str = "") -> Table:
    table = Table(title=title or None, expand=False, header_style="bold")
    for column in ("node", "from", "status", "val ± se", "Δ", "reward", "steps", "s", "schedule"):
        table.add_column(column, justify="left" if column in ("node", "from", "status", "schedule") else "right",
                         no_wrap=column != "schedule")
    best = tree.best()
    for node in tree.nodes.values():
        parent_score = tree.score_of(node.parent)
        delta = None if node.val_score is None or parent_score is None else node.val_score - parent_score
        val = "-" if node.val_score is None else f"{node.val_score:.3f}±{node.val_stderr:.3f}"
        style = STATUS_STYLE.get(node.status.value, "")
        table.add_row(
            Text(node.id + (" ★" if best is not None and node.id == best.id else ""),
                 style="bold" if best is node else ""),
            node.parent or "base",
            Text(STATUS_SHORT.get(node.status.value, node.status.value), style=style),
            val,
            "-" if delta is None else f"{delta:+.3f}",
            fmt(node.train_reward),
            str(node.steps),
            f"{node.seconds:.0f}",
            schedule_text(node.hyperparameters),
        )
    return table


@dataclass
class RunningStage:
    node: Node
    phase: str = ""
    last: dict = field(default_factory=dict)  # its latest step record with a reward

    def describe(self) -> str:
        return (f"| {self.node.id} {self.phase}: step {self.last.get('step', 0)}/{self.node.planned_steps or '?'}"
                f" reward {fmt(self.last.get('reward'))} entropy {fmt(self.last.get('entropy'))}")


class LiveView(Observer):
    """Redraws a compact dashboard on every step; prints messages above it."""

    def __init__(self, console: Console):
        self.console = console
        self.budget: Budget | None = None
        self.tree: Tree | None = None
        self.name = ""
        self.running: dict[str, RunningStage] = {}  # several with --parallel
        self.live = Live(console=console, refresh_per_second=4, transient=True)

    def render(self):
        parts = []
        if self.tree is not None and self.tree.nodes:
            parts.append(nodes_table(self.tree))
        status = Text()
        if self.budget is not None:
            status.append(self.budget.describe() + f"  elapsed {self.budget.elapsed:.0f}s  ")
        if self.tree is not None:
            best = self.tree.best()
            status.append(f"base {fmt(self.tree.base_score)}  best {fmt(best.val_score if best else None)}  ")
            if self.budget is not None and (to_go := self.budget.goals.distance(self.tree)) is not None:
                status.append(f"target {self.budget.goals.target:g} "
                              f"({'reached' if to_go <= 0 else f'{to_go:.3f} to go'})  ")
        parts.append(status)
        for stage in self.running.values():
            if stage.node.status == Status.RUNNING:
                parts.append(Text(stage.describe(), style="cyan"))
        return Group(*parts)

    def refresh(self) -> None:
        self.live.update(self.render(), refresh=True)

    def session_started(self, name: str, tree: Tree, budget: Budget) -> None:
        self.tree, self.budget, self.name = tree, budget, name
        self.console.print(f"[bold]autorl[/] session [cyan]{name}[/]")
        self.live.start()

    def proposal_pending(self, proposal, parent, key=None) -> None:
        """A session run with --approve … --wait: the decision comes from an attached TUI."""
        self.console.print(f"a stage from {proposal.parent or 'base'} waits for a decision: "
                           f"autorl tui {self.name}", markup=False, highlight=False)

    def message(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)  # error text may hold [brackets]

    def stage_started(self, node: Node, tree: Tree) -> None:
        self.running[node.id] = RunningStage(node)
        self.refresh()

    def stage_phase(self, node: Node, phase: str) -> None:
        self.running.setdefault(node.id, RunningStage(node)).phase = phase
        self.refresh()

    def step(self, node: Node, record: dict) -> None:
        if "reward" in record:
            self.running.setdefault(node.id, RunningStage(node)).last = record
            self.refresh()

    def stage_finished(self, node: Node, tree: Tree) -> None:
        self.running.pop(node.id, None)
        score = "failed" if node.val_score is None else f"val {node.val_score:.3f} ± {node.val_stderr:.3f}"
        self.console.print(f"  {node.id} (from {node.parent or 'base'}) {score}  "
                           f"[dim]{schedule_text(node.hyperparameters)}[/]")
        self.refresh()

    def session_finished(self, tree: Tree, status: str, reason: str) -> None:
        self.live.stop()
        self.console.print(nodes_table(tree, title="session tree"))
        colour = "green" if status == "finished" else "red"
        self.console.print(f"[{colour}]session {status}[/]: {reason}")
