"""Rebuild env/data/ (the three splits) from the data file the task was generated from.

FROZEN. `autorl init DIR --from-data FILE` ran this once; by hand, with the same file:

    python env/prepare.py --source FILE

It reads JSONL, CSV or Parquet with the datasets library, takes the two fields
env/task.toml names, drops rows with an empty prompt or answer and rows whose normalised
prompt came before (duplicates), and splits by a hash of the normalised prompt: the
items are ordered by the hash, the first ``validation_size`` are validation, the next
``test_size`` test, the rest train. The same prompt therefore always lands in the same
split, whatever the row order, and no prompt is in two splits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class DataError(ValueError):
    """The file cannot give the task its splits; the message is one line for the user."""


def read_table(path: Path) -> list[dict]:
    """Every row of a JSONL, CSV or Parquet file, as the datasets library reads it."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataError(f"{path}: read .jsonl, .json, .csv or .parquet files, not {path.suffix or 'no suffix'}")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as cache:
        try:
            table = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=cache)
        except Exception as error:  # noqa: BLE001 - any parse failure is the file's
            raise DataError(f"{path}: cannot read it as {path.suffix[1:].upper()}: "
                            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
        found = table.to_list()
    if not found:
        raise DataError(f"{path}: the file holds no rows")
    return found


def columns_of(found: list[dict]) -> list[str]:
    return list(found[0]) if found else []


def as_text(value) -> str:
    """A cell as text: numbers without a spurious '.0', lists and objects as JSON."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def prompt_key(prompt: str) -> str:
    """Two prompts that differ only in case or spacing are the same prompt.

    >>> prompt_key("Add  2 and 3") == prompt_key(" add 2 and 3 ")
    True
    """
    return hashlib.sha256(" ".join(prompt.split()).casefold().encode()).hexdigest()


def unique_items(found: list[dict], prompt_field: str, answer_field: str) -> tuple[list[dict], dict]:
    """Items with a prompt and an answer, one per normalised prompt, and what was dropped."""
    items, seen, counts = [], set(), {"rows": len(found), "empty": 0, "duplicates": 0}
    for row in found:
        prompt, answer = as_text(row.get(prompt_field)).strip(), as_text(row.get(answer_field)).strip()
        if not prompt or not answer:
            counts["empty"] += 1
            continue
        key = prompt_key(prompt)
        if key in seen:
            counts["duplicates"] += 1
            continue
        seen.add(key)
        items.append({"id": key[:16], "prompt": prompt, "answer": answer})
    return items, counts


def split(items: list[dict], validation_size: int, test_size: int) -> dict[str, list[dict]]:
    """Validation, test and train, disjoint, by the order of the prompts' hashes."""
    ordered = sorted(items, key=lambda item: item["id"])
    parts = {"validation": ordered[:validation_size],
             "test": ordered[validation_size:validation_size + test_size],
             "train": ordered[validation_size + test_size:]}
    empty = [name for name, part in parts.items() if not part]
    if empty:
        raise DataError(f"{len(items)} distinct prompts cannot fill validation ({validation_size}), test "
                        f"({test_size}) and train: the {' and '.join(empty)} split{'s' * (len(empty) > 1)} would be "
                        "empty; pass a smaller --val-size or --test-size, or a larger file")
    return parts


def write_splits(parts: dict[str, list[dict]], counts: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, part in parts.items():
        with (out / f"{name}.jsonl").open("w") as handle:
            for item in part:
                handle.write(json.dumps(item) + "\n")
    summary = {**counts, **{name: len(part) for name, part in parts.items()}}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True, help="the data file the task was generated from")
    parser.add_argument("--out", type=Path, default=HERE / "data")
    args = parser.parse_args(argv)
    settings = tomllib.loads((HERE / "task.toml").read_text())
    fields, sizes = settings["fields"], settings["splits"]
    try:
        items, counts = unique_items(read_table(args.source), fields["prompt"], fields["answer"])
        parts = split(items, sizes["validation"], sizes["test"])
    except DataError as error:
        raise SystemExit(str(error)) from None
    write_splits(parts, counts, args.out)
    print(f"{args.out}: train {len(parts['train'])}, validation {len(parts['validation'])}, test "
          f"{len(parts['test'])} ({counts['duplicates']} duplicates and {counts['empty']} empty rows dropped)")


if __name__ == "__main__":
    main()
