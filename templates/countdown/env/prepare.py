"""Write the base model into env/base_model as safetensors, from a folder or a hub id.

FROZEN. `autorl init DIR --template countdown --base-model ID_OR_PATH` does the same;
this script is for re-creating it by hand:

    python env/prepare.py --base-model Qwen/Qwen2.5-0.5B-Instruct --revision main
    python env/prepare.py --base-model /models/my-instruct-model

A hub id needs the network (here, never inside a trial); the files kept are weights in
safetensors, the config and the tokenizer: nothing that can run code when loaded.
The countdown data needs no preparation: env/task.py generates it deterministically.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEEP = ("*.safetensors", "*.json", "*.jinja", "*.txt", "*.model")


def copy_model(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for pattern in KEEP:
        for path in source.glob(pattern):
            shutil.copyfile(path, out / path.name)


def download(repo_id: str, revision: str | None, out: Path) -> str:
    from huggingface_hub import snapshot_download

    folder = snapshot_download(repo_id, revision=revision, allow_patterns=list(KEEP))
    copy_model(Path(folder), out)
    return Path(folder).name  # the commit the revision resolved to


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", required=True, help="a local folder, or a Hugging Face model id")
    parser.add_argument("--revision", default=None, help="hub revision (branch, tag or commit) to pin")
    parser.add_argument("--out", type=Path, default=HERE / "base_model")
    args = parser.parse_args(argv)
    source = Path(args.base_model).expanduser()
    if source.is_dir():
        copy_model(source, args.out)
        print(f"copied {source} to {args.out}")
    else:
        commit = download(args.base_model, args.revision, args.out)
        print(f"downloaded {args.base_model}@{commit} to {args.out}")


if __name__ == "__main__":
    main()
