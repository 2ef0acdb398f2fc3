"""Putting a base model into a template: from a local folder, or from the Hugging Face
hub at a pinned revision (the user's network, at ``autorl init`` time; a trial never has
one). Only files that cannot run code when loaded are kept: safetensors weights, JSON
config and tokenizer files, chat templates.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from autorl.errors import TemplateError
from autorl.stages.evaluate import SAFE_SUFFIXES

KEEP = tuple(f"*{suffix}" for suffix in sorted(SAFE_SUFFIXES))  # what a checkpoint may hold, nothing more


def parse_source(text: str) -> tuple[str, str | None]:
    """``ID[@REVISION]`` or a folder.

    >>> parse_source("Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775")
    ('Qwen/Qwen2.5-0.5B-Instruct', '7ae557604adf67be50417f59c2c2f167def9a775')
    """
    if Path(text).expanduser().is_dir():
        return str(Path(text).expanduser().resolve()), None
    name, _, revision = text.partition("@")
    return name, revision or None


def copy_weights(source: Path, dest: Path) -> None:
    kept = [path for pattern in KEEP for path in source.glob(pattern)]
    if not any(path.suffix == ".safetensors" for path in kept):
        raise TemplateError(f"base model {source} has no .safetensors weights; save it with safe_serialization=True")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for path in kept:
        shutil.copyfile(path, dest / path.name)


def download(repo_id: str, revision: str | None) -> tuple[Path, str]:
    """A hub snapshot (weights, config, tokenizer only) and the commit it resolved to."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(KEEP)))
    except Exception as exc:  # offline, unknown id, gated model: the hub raises many kinds
        raise TemplateError(f"cannot download base model {repo_id!r} ({str(exc).splitlines()[0][:200]}); "
                            "check the id and the network, or pass a local folder") from exc
    return folder, folder.name


def install_base_model(template_dir: Path, source_text: str) -> str:
    """Put the base model named by ``source_text`` into the template's env/ and record where
    it came from in env/constants.toml; returns a one-line description."""
    constants_path = template_dir / "env" / "constants.toml"
    text = constants_path.read_text()
    folder_name = re.search(r'^base_model\s*=\s*"([^"]+)"', text, re.M)
    dest = template_dir / "env" / (folder_name.group(1) if folder_name else "base_model")
    source, revision = parse_source(source_text)
    if Path(source).is_dir():
        copy_weights(Path(source), dest)
        origin, pinned = source, ""
    else:
        folder, pinned = download(source, revision)
        copy_weights(folder, dest)
        origin = source
    constants_path.chmod(0o644)
    constants_path.write_text(set_model_source(text, origin, pinned))
    return f"{origin}" + (f"@{pinned}" if pinned else "")


def set_model_source(text: str, source: str, revision: str) -> str:
    """constants.toml with ``[model] source`` and ``revision`` set (added after base_model if absent).

    >>> print(set_model_source('[model]\\nbase_model = "m"\\n', "org/x", "abc"))
    [model]
    base_model = "m"
    source = "org/x"
    revision = "abc"
    <BLANKLINE>
    """
    for key, value in (("revision", revision), ("source", source)):
        line = f'{key} = "{value}"'
        if re.search(rf"^{key}\s*=.*$", text, re.M):
            text = re.sub(rf"^{key}\s*=.*$", lambda _, line=line: line, text, count=1, flags=re.M)
        else:
            text = re.sub(r'^(base_model\s*=.*)$', lambda m, line=line: f"{m.group(1)}\n{line}", text, count=1,
                          flags=re.M)
    return text
