"""Which columns of the user's file hold the prompt and the answer."""

from __future__ import annotations

from autorl.errors import DataFileError

PROMPT_NAMES = ("prompt", "question", "problem", "input", "instruction", "query", "text")
ANSWER_NAMES = ("answer", "solution", "target", "output", "label", "response", "completion", "ground_truth")


def pick_field(columns: list[str], asked: str | None, guesses: tuple[str, ...], role: str, option: str,
               source: str) -> str:
    """The column the user named, else the first that looks like ``role`` (case-insensitive).

    >>> pick_field(["Question", "Answer"], None, PROMPT_NAMES, "prompt", "--prompt-field", "f.csv")
    'Question'
    """
    listed = ", ".join(columns)
    if asked is not None:
        if asked not in columns:
            raise DataFileError(f"{source} has no column {asked!r} ({option}); its columns: {listed}")
        return asked
    by_name = {column.casefold(): column for column in columns}
    for guess in guesses:
        if guess in by_name:
            return by_name[guess]
    raise DataFileError(f"{source}: no column looks like the {role} (tried {', '.join(guesses)}); "
                        f"its columns: {listed}; pass {option}")
