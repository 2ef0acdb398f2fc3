"""A template from the user's own data file: `autorl init DIR --from-data FILE`.

The generated template is a copy of ``skeleton/`` (a generic train.py and a frozen env/
whose task.py reads ``env/task.toml`` and the splits in ``env/data/``) with the
settings, the splits, the base model, ``space.toml``, ``constants.toml`` and a stub
``program.md`` written for the file and the model. Everything is checked before the
folder appears: bad input gets one line and creates nothing.
"""

import importlib.util
from pathlib import Path


def module_from_file(path: Path, name: str):
    """Import one file as a module of its own: the generated template's env/ files (which
    must stand alone, importing nothing of autorl) and a user's reward file."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
