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
