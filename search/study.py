"""Optuna study storage: one journal file per session, or a shared database.

By default a journal file (not SQLite) in the session's folder, which the session also
keeps in MLflow: it needs no schema migration; only the controller writes to it (ask/tell). With a
database URL (``--study-storage postgresql://…``, e.g. the one `autorl server up`
starts) the studies live beside other people's, in one place optuna-dashboard opens.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState, create_trial

N_STARTUP_TRIALS = 4
JOURNAL = "optuna.journal"


def storage_url(folder: Path, url: str | None = None) -> str:
    """Where a session's study lives, as optuna-dashboard takes it."""
    return url or str(folder / JOURNAL)


class FlockLock:
    """The journal's write lock as a kernel ``flock``: a writer killed while it holds it
    releases it by dying. Optuna's own file locks are files that outlive a SIGKILL, and the
    next process waits out a 30-second grace period before taking them over. (Optuna calls
    only ``acquire`` and ``release``; its base class is private.)"""

    def __init__(self, path: Path):
        self.path = path
        self.handle = None

    def acquire(self) -> bool:
        self.handle = self.path.open("a")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return True

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


def open_storage(folder: Path, url: str | None = None):
    """The database at ``url``, else the journal file in ``folder``."""
    if url is None:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FlockLock(folder / f".{JOURNAL}.flock")
        return JournalStorage(JournalFileBackend(str(folder / JOURNAL), lock_obj=lock))
    return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})


def holds_study(folder: Path, name: str) -> bool:
    """Whether the journal in ``folder`` holds a study called ``name``."""
    return any(study.study_name == name for study in open_storage(folder).get_all_studies())


def open_study(folder: Path, session: str, seed: int, url: str | None = None) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(folder, url)
    sampler = tpe_sampler(seed)
    return optuna.create_study(
        study_name=session, storage=storage, direction="maximize", sampler=sampler, load_if_exists=True
    )


def reseed(study: optuna.Study, seed: int, *keys: int) -> None:
    """A fresh TPE sampler seeded from the session seed and where the search stands.

    Sampling then depends only on the study's history and ``keys`` (e.g. the node count),
    not on how many samples this process drew before: a resumed session draws what the
    uninterrupted one would have.
    """
    mixed = hash((seed, *keys)) & 0x7FFFFFFF  # ints hash to themselves: stable across processes
    study.sampler = tpe_sampler(mixed)


def tpe_sampler(seed: int) -> optuna.samplers.TPESampler:
    """TPE with the constant liar: a trial still running (a stage training beside this one,
    with ``--parallel``) counts as a poor result, so parallel asks spread out instead of
    piling onto the same region. With nothing running it samples as plain TPE."""
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=N_STARTUP_TRIALS, constant_liar=True)


def fail_trial(study: optuna.Study, number: int | None) -> None:
    """Fail a trial whose values will not run as sampled (rejected, edited); a no-op for None."""
    if number is not None:
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)


def fail_orphan_trials(study: optuna.Study, tree, names: set[str] | None = None) -> list[int]:
    """Fail trials left RUNNING by a killed controller that no node of ``tree`` owns, and
    make the next ask propose the same stage.

    The study stores each sampled value as its own write, so a kill can leave a trial with
    only some of its values (``names``: the values a whole trial holds). A trial that was
    enqueued is enqueued again with the values it was given; a sampled one with all its
    values is enqueued with them; a sampled one cut short among them is only failed: the
    sampler, reseeded from where the search stands (``reseed``), draws it again whole,
    where enqueueing the part would mix it with a fresh draw."""
    known = {n.optuna_trial for n in tree.nodes.values() if n.optuna_trial is not None}
    orphans = [t for t in study.trials if t.state == TrialState.RUNNING and t.number not in known
               and "schedule" not in t.user_attrs]
    for trial in orphans:
        study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
        values = trial.system_attrs.get("fixed_params")
        if values is None and (names is None or names <= trial.params.keys()):
            values = trial.params
        if values is not None:
            study.enqueue_trial(values, user_attrs={"requeued_from": trial.number})
    return [t.number for t in orphans]


def record_node(study: optuna.Study, space, tree, node) -> None:
    """Tell the study how a node did, whoever proposed it (value: gain over the parent).

    Nodes Optuna asked for are told by trial number; others are added as finished trials
    over the full space, so TPE learns from every stage the session ran.
    """
    gain = node.val_score - (tree.score_of(node.parent) or 0.0) if node.scored else None
    number = node.optuna_trial
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
