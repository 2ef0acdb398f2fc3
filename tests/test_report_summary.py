"""The report's and show's headline: a winner that scored below the base model is not
presented as a gain."""

from autorl.storage.report import NO_GAIN
from autorl.views.session_report import summary_lines


def session(best_val: float, base_val: float) -> dict:
    best = {"id": "n007", "path": ["n007"], "val_score": best_val, "val_stderr": 0.016, "test_score": 0.526,
            "test_stderr": 0.016}
    return {"topic": "t", "template": "tpl", "strategy": "tree", "stages_spent": 12, "train_steps_spent": 160,
            "seconds": 330, "status": "finished", "reason": "budget spent", "best": best, "base_score": base_val,
            "base_test_score": 0.554, "beats_base": best_val > base_val}


def test_a_session_whose_best_stage_is_below_the_base_says_so():
    lines = summary_lines(session(best_val=0.512, base_val=0.528))
    assert any(NO_GAIN in line for line in lines)
    assert any(line.startswith("**Winner:** n007") and "base model validation 0.528" in line for line in lines)


def test_a_session_that_beat_the_base_claims_no_such_thing():
    assert not any(NO_GAIN in line for line in summary_lines(session(best_val=0.61, base_val=0.528)))


def test_the_headline_says_how_much_of_the_spent_budget_trained_the_winner():
    data = session(best_val=0.61, base_val=0.528)
    data["best"]["path_steps"] = 60
    assert ("**Compute:** its path trained 60 of the 160 GRPO steps spent; the rest trained stages off it."
            in summary_lines(data))


# The progress figure counts the budget's unit, GRPO training steps, not stages.

def node(node_id: str, parent: str | None, steps: int, val: float | None, depth: int = 1) -> dict:
    return {"id": node_id, "parent": parent, "depth": depth, "steps": steps, "val_score": val,
            "val_stderr": None if val is None else 0.02, "status": "succeeded" if val is not None else "failed",
            "reason": "" if val is not None else "crashed at step 3", "hyperparameters": {"learning_rate": 1e-4,
            "max_steps": 20, "loss_type": "dapo"}, "mlflow_run_id": f"run-{node_id}", "diagnosis": [], "timing": {}}


NODES = [node("n001", None, 20, 0.40), node("n002", None, 40, 0.55), node("n003", "n002", 3, None, depth=2),
         node("n004", "n002", 10, 0.50, depth=2), node("n005", "n004", 20, 0.61, depth=3)]


def test_progress_is_drawn_against_the_steps_spent_when_each_stage_ended():
    from autorl.views.figures import best_so_far, steps_spent

    assert steps_spent(NODES) == [20, 60, 63, 73, 93]  # in creation order; a crash counts what it ran
    assert best_so_far(NODES) == [0.40, 0.55, 0.55, 0.55, 0.61]
    assert steps_spent([]) == [] and steps_spent([{"steps": 0}, {}]) == [0, 0]  # not yet trained


def test_the_winning_schedule_is_drawn_over_the_steps_of_its_path():
    from autorl.views.figures import path_steps

    assert path_steps([NODES[1], NODES[3], NODES[4]]) == [0, 40, 50, 70]  # each stage starts at its step_offset


def test_the_report_renders_with_the_step_axis(tmp_path):
    from autorl.views.session_report import write_report

    data = session(best_val=0.61, base_val=0.528) | {
        "name": "s", "mlflow_run_id": "run-s", "nodes": NODES, "importance": None, "counters": {},
        "best": {**NODES[4], "path": ["n002", "n004", "n005"], "test_score": 0.6, "test_stderr": 0.02}}
    paths = write_report(data, tmp_path)
    for key in ("progress", "tree", "schedule", "gap"):
        assert paths[key].read_bytes().startswith(b"\x89PNG"), key
    assert "![best validation so far](progress.png)" in paths["markdown"].read_text()
    assert paths["html"].read_text().count("data:image/png;base64,") == 4
