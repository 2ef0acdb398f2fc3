"""What the base model and the machine say about a generated template's space.

Rules of thumb, stated so a reader can change them: full fine-tuning needs about 16
bytes a parameter (fp32 weights, gradients and AdamW's two moments), so where that is
more than half the memory of the device that trains (the GPU's, else the machine's)
LoRA is on; learning rates shrink with the model's size and grow tenfold for LoRA; the
completion budget follows the answers' length in tokens.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

FULL_TUNE_BYTES_PER_PARAMETER = 16
MEMORY_SHARE = 0.5  # full fine-tuning may take at most this share of the device's memory
# (parameters up to, (low, high, default)) for full fine-tuning; LoRA multiplies each by LORA_RATE_FACTOR
RATES = ((5e8, (1e-6, 1e-4, 2e-5)), (3e9, (5e-7, 5e-5, 1e-5)), (math.inf, (1e-7, 2e-5, 5e-6)))
LORA_RATE_FACTOR = 10.0


@dataclass(frozen=True)
class ModelFacts:
    parameters: int
    context: int | None  # max_position_embeddings, when the config says
    chat: bool  # its tokenizer has a chat template

    def size_text(self) -> str:
        return f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e9 else f"{self.parameters / 1e6:.0f} M"


@dataclass(frozen=True)
class Device:
    gpu: bool
    memory_bytes: int

    def describe(self) -> str:
        return f"{'GPU' if self.gpu else 'CPU'} with {self.memory_bytes / 2 ** 30:.0f} GiB"


def model_facts(folder: Path, tokenizer) -> ModelFacts:
    """Parameters counted from the safetensors headers (nothing loaded), the context from config.json."""
    from safetensors import safe_open

    parameters = 0
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():
                parameters += math.prod(weights.get_slice(name).get_shape())
    config = json.loads((folder / "config.json").read_text())
    context = config.get("max_position_embeddings") or config.get("n_positions")
    return ModelFacts(parameters, int(context) if context else None, bool(getattr(tokenizer, "chat_template", None)))


def this_device() -> Device:
    import torch

    if torch.cuda.is_available():
        return Device(True, torch.cuda.get_device_properties(0).total_memory)
    return Device(False, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def wants_lora(facts: ModelFacts, device: Device) -> bool:
    """
    >>> wants_lora(ModelFacts(135_000_000, 8192, True), Device(False, 24 * 2 ** 30))
    False
    >>> wants_lora(ModelFacts(7_000_000_000, 8192, True), Device(True, 80 * 2 ** 30))
    True
    """
    return facts.parameters * FULL_TUNE_BYTES_PER_PARAMETER > MEMORY_SHARE * device.memory_bytes


def learning_rates(parameters: int, lora: bool) -> tuple[float, float, float]:
    """(low, high, default) of the learning rate.

    >>> learning_rates(135_000_000, lora=False)
    (1e-06, 0.0001, 2e-05)
    """
    low, high, default = next(rates for limit, rates in RATES if parameters <= limit)
    factor = LORA_RATE_FACTOR if lora else 1.0
    return low * factor, high * factor, default * factor


def completion_budget(answer_tokens: list[int]) -> int:
    """The default completion budget: room for a short reasoning sentence around an answer
    of the usual length (twice the 95th percentile of the answers' tokens, plus 16), in
    multiples of 8, at least 32.

    >>> completion_budget([1, 2, 2, 3])
    32
    >>> completion_budget([40] * 20)
    96
    """
    ordered = sorted(answer_tokens) or [0]
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return max(32, 8 * math.ceil((2 * p95 + 16) / 8))


def completion_choices(budget: int) -> list[int]:
    """
    >>> completion_choices(32)
    [24, 32, 48]
    """
    return sorted({8 * math.ceil(0.75 * budget / 8), budget, 8 * math.ceil(1.5 * budget / 8)})
