"""What a person sees in the plain terminal view while a stage runs."""

from io import StringIO

from rich.console import Console

from autorl.loop.budget import Budget
from autorl.views.live import LiveView
from search.tree import Node, Status, Tree


def test_the_status_line_names_the_running_stage_and_its_phase():
    console = Console(file=StringIO(), width=160, force_terminal=False)
    view = LiveView(console)
    tree = Tree(base_score=0.5, base_stderr=0.01)
    node = tree.add(Node(id="n001", parent=None, depth=1, hyperparameters={"max_steps": 20}, planned_steps=20, seed=1,
                         proposer="tree", status=Status.RUNNING))
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


def test_stages_side_by_side_each_have_their_line_until_they_end():
    view = LiveView(Console(file=StringIO(), width=160, force_terminal=False))
    tree = Tree(base_score=0.5, base_stderr=0.01)
    first, second = (tree.add(Node(id=i, parent=None, depth=1, hyperparameters={}, planned_steps=20, seed=1,
                                   proposer="tree", status=Status.RUNNING)) for i in ("n001", "n002"))
    view.tree, view.budget = tree, Budget(8, None)
    view.stage_started(first, tree)
    view.stage_started(second, tree)
    view.step(first, {"step": 4, "reward": 0.5})
    view.stage_phase(second, "evaluating")

    def shown() -> str:
        rendered = StringIO()
        Console(file=rendered, width=160).print(view.render())
        return rendered.getvalue()

    assert "n001 : step 4/20 reward 0.500" in shown() and "n002 evaluating" in shown()
    first.status = Status.SUCCEEDED
    view.stage_finished(first, tree)
    assert "n001 :" not in shown() and "n002 evaluating" in shown()
