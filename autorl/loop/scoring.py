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
from autorl.storage.report import NO_GAIN, beats_base, path_share
from autorl.storage.tracking import Tracker, first_line
from autorl.storage.winner import log_winner
from search.tree import Tree

MODEL_TAG, REGISTERED_TAG = "autorl.model_uri", "autorl.registered_model"


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

    def has_base_items(self) -> bool:
        """Whether the base model's validation items are here (stages are paired against them)."""
        return (self.stages.node_dir(None) / "eval_validation.json").is_file()

    def base(self) -> None:
        """The base model's validation score."""
        result = self.evaluator.score(self.base_model, "validation", self.stages.node_dir(None))
        self.tree.base_score, self.tree.base_stderr = result.mean, result.stderr
        self.stages.parts.files.save_base_evaluation()
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
        test = self.evaluator.score(self.stages.checkpoint(best.id), "test", best_dir)
        base = self.evaluator.score(self.base_model, "test", self.stages.node_dir(None))
        best.test_score, best.test_stderr = test.mean, test.stderr
        self.ledger.add(eval_timing(test)["eval_generation_s"] + eval_timing(base)["eval_generation_s"])
        self.tracker.log_metrics(best.mlflow_run_id, {"test_score": test.mean, "test_stderr": test.stderr})
        self.tracker.set_tags(best.mlflow_run_id, records.node_tags(best))  # the record holds the test score too
        self.tracker.log_artifacts(best.mlflow_run_id, [test.path])
        self.stages.parts.files.save_base_evaluation()
        self.tracker.log_metrics(self.session_run_id, {
            "best_val_score": best.val_score, "best_test_score": test.mean, "best_test_stderr": test.stderr,
            "base_test_score": base.mean, "val_test_gap": best.val_score - test.mean,
        })
        self.tracker.set_tags(self.session_run_id, {"autorl.best_node": best.id})
        share = path_share(best.path_steps, self.ledger.spending()["train_steps_spent"])  # the count show reads back
        self.observer.message(
            f"best {best.id}: validation {best.val_score:.3f}, test {test.mean:.3f} ± {test.stderr:.3f} "
            f"(base test {base.mean:.3f}; val-test gap {best.val_score - test.mean:+.3f})"
            + (f"; {share}" if share else ""))
        if beats_base(best.val_score, self.tree.base_score) is False:
            self.observer.message(f"{NO_GAIN} (validation {self.tree.base_score:.3f})")

    def publish(self, register: str | None) -> None:
        """Log the best node's checkpoint as an MLflow model (registered as ``register``), once:
        a failure is said, never raised (every score and record is already stored)."""
        best = self.tree.best()
        if best is None or self.tracker.client.get_run(self.session_run_id).data.tags.get(MODEL_TAG):
            return
        try:
            logged = log_winner(self.tracker.uri, best.mlflow_run_id, self.stages.checkpoint(best.id), register)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self.observer.message(f"the winner {best.id} was not logged as an MLflow model: {first_line(exc)}")
            return
        tags = {MODEL_TAG: logged.uri} | ({REGISTERED_TAG: logged.registered} if logged.registered else {})
        self.tracker.set_tags(self.session_run_id, tags)
        self.observer.message(f"the winner {best.id} as an MLflow model: {logged.registered or logged.uri} "
                              "(mlflow.transformers.load_model)")
