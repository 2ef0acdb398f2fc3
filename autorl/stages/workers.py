"""What a session's warm worker imports, and which paths it may show its runs.

The worker preloads what the template's own scripts import: every ``import`` in the
template's pristine ``train.py`` and ``env/evaluate.py`` (never the session's edited
copy, which the LLM writes), resolved the way each script resolves it. A name that turns
out to live outside the installed packages and the frozen ``env/`` is skipped by the
worker, not imported. Packages that initialise a GPU when imported are never preloaded:
a process must not fork after CUDA is up.
"""

from __future__ import annotations

import ast
from pathlib import Path

from autorl.config import SessionConfig
from autorl.stages.template import Template
from sandbox.warm import WorkerPlan

NEVER_PRELOAD = ("vllm", "__future__")


def imports_of(script: Path) -> dict[str, list[str]]:
    """Absolute imports anywhere in ``script``: module -> names taken from it.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "s.py"
    >>> _ = path.write_text("import torch\\nfrom trl import GRPOConfig, GRPOTrainer\\nfrom . import x\\n")
    >>> imports_of(path)
    {'torch': [], 'trl': ['GRPOConfig', 'GRPOTrainer']}
    """
    try:
        tree = ast.parse(script.read_text())
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, [])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = found.setdefault(node.module, [])
            names += [alias.name for alias in node.names if alias.name != "*" and alias.name not in names]
    return {name: names for name, names in found.items() if name.split(".")[0] not in NEVER_PRELOAD}


def preload_entry(script: Path, search_paths: list[Path]) -> dict:
    imports = imports_of(script)
    return {"paths": [str(p) for p in search_paths], "modules": list(imports),
            "names": {module: names for module, names in imports.items() if names}}


def worker_plan(config: SessionConfig, template: Template, workspace: Path,
                checkpoints: Path | None = None) -> WorkerPlan:
    """Preload the template's imports; show each run the workspace and its own node folders
    (and its parent's checkpoint in ``checkpoints``, a local artifact store)."""
    env = workspace / "env"
    return WorkerPlan(
        preload=[preload_entry(template.path / "train.py", [workspace]),
                 preload_entry(template.path / "env" / "evaluate.py", [env, workspace])],
        allowed_roots=[env],
        hidden_roots=[config.session_dir / "nodes", config.session_dir / "base",
                      *([checkpoints] if checkpoints else [])],
        visible=[workspace],
        watch=[env],
        home=config.session_dir / "worker",
    )
