"""Search/replace edits to ``train.py``, applied only when every block is unambiguous.

An LLM describes a code change as blocks of ``search`` text (copied from the current
file) and ``replace`` text. Each search must match exactly once, and the result must
still parse as Python; otherwise the edit is refused with a message precise enough to
send back for a repair.
"""

from __future__ import annotations

import ast

from pydantic import BaseModel, ConfigDict, Field

from search.errors import ProposalError

EDITABLE_FILE = "train.py"


class EditBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str = Field(EDITABLE_FILE, description="Always train.py: no other file may be edited.")
    search: str = Field(description="Exact text of train.py to replace; must occur exactly once.")
    replace: str = Field(description="The new text.")


def apply_edit(source: str, blocks: list[EditBlock]) -> str:
    """Apply ``blocks`` in order to ``source`` and return the new text (ending with a newline
    when ``source`` does).

    >>> apply_edit("a = 1\\nb = 2\\n", [EditBlock(search="b = 2", replace="b = 3")])
    'a = 1\\nb = 3\\n'
    """
    text = source
    for number, block in enumerate(blocks, start=1):
        if block.file.strip().lstrip("./") != EDITABLE_FILE:
            raise ProposalError(f"edit block {number} targets {block.file!r}: only {EDITABLE_FILE} may be edited")
        if not block.search:
            raise ProposalError(f"edit block {number} has an empty search text")
        count = text.count(block.search)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise ProposalError(
                f"edit block {number}: the search text {where} in {EDITABLE_FILE}; copy it exactly "
                f"from the current file and include enough lines to make it unique: {block.search[:200]!r}"
            )
        text = text.replace(block.search, block.replace, 1)
    if source.endswith("\n") and not text.endswith("\n"):
        text += "\n"  # a block whose search ran to the end of the file took its final newline with it
    if text == source:
        raise ProposalError("the edit changes nothing")
    try:
        ast.parse(text, filename=EDITABLE_FILE)
    except SyntaxError as exc:
        raise ProposalError(f"the edited {EDITABLE_FILE} does not parse: {exc.msg} at line {exc.lineno}") from exc
    return text
