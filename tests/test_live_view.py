"""What a person sees in the plain terminal view while a stage runs."""

from io import StringIO

from rich.console import Console

from autorl.budget import Budget
from autorl.live import LiveView
from search.tree import Node, Status, Tree


def test_the_status_line_names_the_running_stage_and_its_phase():
    console = Console(file=StringIO(), width=160, force_terminal=False)
    view = LiveView(console)
    tree = Tree(base_score=0.5, base_stderr=0.01)
    node = tree.add(Node(id="n001", parent=None, depth=1, hyperparameters={"max_steps": 20}, planned_steps=20, seed=1, proposer="tree",
                         status=Status.RUNNING))
    view.tree, view.budget = tree, Budget(8, None)
    for phase, expected in (("starting", "n001 starting"), ("training", "n001 training"),
                            ("evaluating", "n001 evaluating")):
        view.stage_phase(node, phase)
        rendered = StringIO()
        Console(file=rendered, width=160).print(view.render())
        assert expected in rendered.getvalue()
    view.step(node, {"step": 3, "reward": 0.25, "entropy": 1.5})
    rendered = StringIO()
    Console(file=rendered, width=160).print(view.render())
    assert "step 3/20" in rendered.getvalue() and "reward 0.250" in rendered.getvalue()
