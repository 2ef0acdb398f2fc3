"""The two scores a session reports besides its stages': the base model's on validation
(the reference every stage is compared with), and the best node's and the base model's
on the test split, once, at the end."""

from __future__ import annotations

from pathlib import Path

from autorl.loop.ledger import Ledger
from autorl.loop.lifecycle import StageLifecycle, eval_timing
from autorl.loop.observer import Observer
from autorl.stages.evaluate import FrozenEvaluator
from autorl.storage import records
from autorl.storage.report import NO_GAIN, beats_base
from autorl.storage.tracking import Tracker
from search.tree import Tree


class Scoring:
    def __init__(self, evaluator: FrozenEvaluator, base_model: Path, stages: StageLifecycle, tree: Tree,
                 tracker: Tracker, session_run_id: str, ledger: Ledger, observer: Observer):
        self.evaluator = evaluator
        self.base_model = base_model
        self.stages = stages
        self.tree = tree
        self.tracker = tracker
        self.session_run_id = session_run_id
        self.ledger = ledger
        self.observer = observer

    def base(self) -> None:
        """The base model's validation score."""
        result = self.evaluator.score(self.base_model, "validation", self.stages.node_dir(None))
        self.tree.base_score, self.tree.base_stderr = result.mean, result.stderr
        self.ledger.add(eval_timing(result)["eval_generation_s"])
        self.tracker.log_metrics(self.session_run_id, {"base_score": result.mean, "base_stderr": result.stderr})
        if result.engine:
            self.tracker.set_tags(self.session_run_id, {"autorl.eval_engine": result.engine})
        engine = f" ({result.engine})" if result.engine else ""
        self.observer.message(f"base model: validation {result.mean:.3f} ± {result.stderr:.3f}{engine}")

    def test(self) -> None:
        """Score the best node, and the base model, once on the test split."""
        best = self.tree.best()
        if best is None:
            self.observer.message("no stage succeeded: nothing to score on the test split")
            return
        best_dir = self.stages.node_dir(best.id)
        test = self.evaluator.score(best_dir / "checkpoint", "test", best_dir)
        base = self.evaluator.score(self.base_model, "test", self.stages.node_dir(None))
        best.test_score, best.test_stderr = test.mean, test.stderr
        self.ledger.add(eval_timing(test)["eval_generation_s"] + eval_timing(base)["eval_generation_s"])
        self.tracker.log_metrics(best.mlflow_run_id, {"test_score": test.mean, "test_stderr": test.stderr})
        self.tracker.set_tags(best.mlflow_run_id, records.node_tags(best))  # the record holds the test score too
        self.tracker.log_artifacts(best.mlflow_run_id, [test.path])
        self.tracker.log_metrics(self.session_run_id, {
            "best_val_score": best.val_score, "best_test_score": test.mean, "best_test_stderr": test.stderr,
            "base_test_score": base.mean, "val_test_gap": best.val_score - test.mean,
        })
        self.tracker.set_tags(self.session_run_id, {"autorl.best_node": best.id})
        self.observer.message(
            f"best {best.id}: validation {best.val_score:.3f}, test {test.mean:.3f} ± {test.stderr:.3f} "
            f"(base test {base.mean:.3f}; val-test gap {best.val_score - test.mean:+.3f})")
        if beats_base(best.val_score, self.tree.base_score) is False:
            self.observer.message(f"{NO_GAIN} (validation {self.tree.base_score:.3f})")
