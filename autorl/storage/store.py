"""Creating the default SQLite tracking store so that nothing can half-make it.

MLflow creates and migrates a SQLite store on first use, without a lock: two
``autorl research`` started together on a fresh runs directory both migrate, one fails
(``duplicate column name``), and the schema can stay half-migrated, after which every
command fails. Here the first use happens under an exclusive ``flock`` next to the
database file; whoever gets it second finds the schema done. A store found
half-migrated (an earlier start killed mid-migration, or a store made by another MLflow
version) is upgraded; if that fails and the store holds no runs it is moved aside and
made again, otherwise the user gets the backup-and-upgrade command.

What a kill during creation leaves (measured with MLflow 3.17: SIGKILL after each of the
271 statements after which the file can change, i.e. every commit and every DDL run
outside a transaction, and at random moments): SQLite's Python driver runs DDL outside
a transaction, so each ``CREATE``/``ALTER`` a migration makes before its first row
write is on disk at once, while the migration's version is committed at its end. A
kill in between leaves some of a migration's tables, indexes or columns with the
version before it, or with none (``table webhooks already exists``, ``duplicate column
name: step`` on the next upgrade), or a rebuilt table's ``_alembic_tmp_<name>`` copy; a
kill at a commit leaves a clean older version, which upgrades. Upgrading fails on the
others, and the store, which holds no runs, is remade; either way the schema comes out
as a fresh store's. A kill while remaking leaves the same states in the new file.

Reading never creates: a missing database file is reported as missing.
"""

from __future__ import annotations

import fcntl
import sqlite3
import time
from contextlib import closing, contextmanager
from pathlib import Path
from urllib.parse import unquote

from autorl.errors import TrackingError


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other store)."""
    if not uri.startswith("sqlite:"):
        return None
    path = unquote(uri.removeprefix("sqlite:///").split("?", 1)[0]) if uri.startswith("sqlite:///") else ""
    if not path or path == ":memory:":
        raise TrackingError(f"tracking URI {uri!r} names no database file; use sqlite:////absolute/path/mlflow.db")
    return Path(path)


@contextmanager
def creation_lock(database: Path):
    """Held while the store is created or migrated: one process at a time."""
    with (database.parent / f".{database.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_sqlite(uri: str, database: Path) -> None:
    """Create or finish migrating the store at ``database``; a no-op when it is current."""
    if not database.parent.is_dir():
        raise TrackingError(f"cannot create tracking store {uri}: folder {database.parent} does not exist; "
                            "create it or pass another --tracking-uri")
    with creation_lock(database):
        import logging

        import sqlalchemy
        from mlflow.store.db import utils

        logging.getLogger("mlflow").setLevel(logging.WARNING)  # schema-migration chatter
        logging.getLogger("alembic").setLevel(logging.WARNING)
        engine = sqlalchemy.create_engine(uri)
        try:
            if not utils._all_tables_exist(engine):
                utils._initialize_tables(engine)
            elif utils._get_schema_version(engine) != utils._get_latest_schema_revision():
                utils._upgrade_db(engine)
        except Exception as exc:  # noqa: BLE001 - alembic and SQLAlchemy raise many kinds
            engine.dispose()
            repair(uri, database, exc)
        finally:
            engine.dispose()


RECORD_TABLES = ("runs", "metrics", "params", "tags", "trace_info", "logged_models")


def run_count(database: Path) -> int:
    """Rows of recorded work in the store, wherever a failed migration left them
    (a migration rebuilding a table keeps it as ``_alembic_tmp_<name>`` meanwhile)."""
    with closing(sqlite3.connect(f"file:{database.resolve()}?mode=ro", uri=True)) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return sum(connection.execute(f'SELECT COUNT(*) FROM "{name}"').fetchone()[0] for name in names
                   if name.removeprefix("_alembic_tmp_") in RECORD_TABLES)


def never_made(database: Path) -> bool:
    """A store a killed first start left short of the current schema, holding no runs: to a
    command that only reads, there is no store yet (the next ``autorl research`` remakes it)."""
    from mlflow.store.db import utils

    try:
        with closing(sqlite3.connect(f"file:{database.resolve()}?mode=ro", uri=True)) as connection:
            row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:  # no version table yet, or not a database: the schema is not there
        row = None
    if row is not None and row[0] == utils._get_latest_schema_revision():
        return False
    try:
        return run_count(database) == 0
    except sqlite3.Error:
        return False  # unreadable: opening it says what is wrong


def repair(uri: str, database: Path, failure: Exception) -> None:
    """A store that cannot be migrated: remade when it holds nothing, else a clear refusal."""
    from mlflow.store.db import utils

    first_line = (str(failure).splitlines() or [type(failure).__name__])[0]
    try:
        runs = run_count(database)
    except sqlite3.Error as exc:  # not even readable: whether it holds runs is unknown, so it stays
        raise TrackingError(
            f"tracking store {database} cannot be migrated ({first_line}) nor read ({exc}); back it up, then run "
            f"`mlflow db upgrade {uri}`, or move it aside, or pass another --tracking-uri") from failure
    if runs:
        raise TrackingError(
            f"tracking store {database} is half-migrated and holds runs ({first_line}); back it up, then run "
            f"`mlflow db upgrade {uri}`, or pass another --tracking-uri") from failure
    parts = [database.with_name(database.name + suffix) for suffix in ("", "-journal", "-wal", "-shm")]
    stamp = base = time.strftime("%Y%m%d-%H%M%S")
    number = 1
    while any(part.with_name(f"{part.name}.broken-{stamp}").exists() for part in parts):
        number += 1  # an earlier repair in the same second (one killed while remaking): its files stay
        stamp = f"{base}-{number}"
    for part in parts:  # a journal left beside a new file would be replayed into it
        if part.exists():
            part.rename(part.with_name(f"{part.name}.broken-{stamp}"))
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)
    try:
        utils._initialize_tables(engine)
    finally:
        engine.dispose()
