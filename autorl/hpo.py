"""Optuna study storage: one journal file next to the MLflow store.

A journal file (not SQLite) because several processes may open it at once and it
needs no schema migration; only the controller writes to it (ask/tell).
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState, create_trial
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend


def open_study(runs_dir: Path, session: str, seed: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(runs_dir / "optuna.journal")))
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    return optuna.create_study(
        study_name=session, storage=storage, direction="maximize", sampler=sampler, load_if_exists=True
    )


def record_node(study: optuna.Study, space, tree, node) -> None:
    """Tell the study how a node did, whoever proposed it (value: gain over the parent).

    Nodes Optuna asked for are told by trial number; others are added as finished trials
    over the full space, so TPE learns from every stage the session ran.
    """
    gain = node.val_score - (tree.score_of(node.parent) or 0.0) if node.scored else None
    number = node.extra.get("optuna_trial")
    if number is not None:
        if gain is None:
            study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        else:
            study.tell(number, gain, skip_if_finished=True)
        return
    trial = create_trial(
        params=node.hyperparameters,
        distributions=space.distributions(),
        value=gain,
        state=TrialState.COMPLETE if gain is not None else TrialState.FAIL,
        user_attrs={"node": node.id, "parent": node.parent or "base", "proposer": node.proposer},
    )
    study.add_trial(trial)
