"""Optuna study storage: one journal file next to the MLflow store.

A journal file (not SQLite) because several processes may open it at once and it
needs no schema migration; only the controller writes to it (ask/tell).
"""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend


def open_study(runs_dir: Path, session: str, seed: int) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(runs_dir / "optuna.journal")))
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    return optuna.create_study(
        study_name=session, storage=storage, direction="maximize", sampler=sampler, load_if_exists=True
    )
