"""Score a checkpoint on a held-out split: greedy decoding, exact match.

FROZEN. Only the controller runs this, never train.py. The checkpoint is untrusted:
it is loaded from safetensors only, with ``trust_remote_code=False``.

    python env/evaluate.py --checkpoint DIR --split validation --out eval.json

Writes ``{"split", "n", "mean", "stderr", "format_rate", "items": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tomllib
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ENV_DIR = Path(__file__).resolve().parent
# Appended after the third-party imports, so nothing in the workspace can shadow them.
sys.path.append(str(ENV_DIR.parent))
from env import task  # noqa: E402


def load_constants() -> dict:
    return tomllib.loads((ENV_DIR / "constants.toml").read_text())


def load_checkpoint(checkpoint: Path):
    """Load tokenizer and model from safetensors, refusing anything that runs code."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, trust_remote_code=False, use_safetensors=True)
    model.eval()
    return tokenizer, model


@torch.no_grad()
def generate(tokenizer, model, problems: list[dict], max_new_tokens: int, batch_size: int) -> list[str]:
    """Greedy completions, decoded the way TRL decodes them (special tokens skipped)."""
    tokenizer.padding_side = "left"
    texts: list[str] = []
    for start in range(0, len(problems), batch_size):
        batch = problems[start : start + batch_size]
        prompts = [tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False)
                   for p in batch]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        output = model.generate(
            **encoded,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        completions = output[:, encoded["input_ids"].shape[1] :]
        texts.extend(tokenizer.batch_decode(completions, skip_special_tokens=True))
    return texts


def score(texts: list[str], problems: list[dict]) -> dict:
    """Mean exact-match accuracy with its standard error and per-item results."""
    items = []
    for text, problem in zip(texts, problems):
        predicted = task.extract_answer(text)
        items.append(
            {
                "id": f"{problem['a']}+{problem['b']}",
                "a": problem["a"],
                "b": problem["b"],
                "answer": problem["answer"],
                "completion": text,
                "correct": int(predicted == problem["answer"]),
                "formatted": int(task.format_reward([text])[0] > 0),
            }
        )
    n = len(items)
    mean = sum(item["correct"] for item in items) / n
    stderr = math.sqrt(mean * (1 - mean) / (n - 1)) if n > 1 else 0.0
    format_rate = sum(item["formatted"] for item in items) / n
    return {"n": n, "mean": mean, "stderr": stderr, "format_rate": format_rate, "items": items}


def evaluate(checkpoint: Path, split: str, n: int | None = None) -> dict:
    constants = load_constants()["eval"]
    if split == "train":
        raise ValueError("the evaluator scores held-out splits only (validation or test)")
    size = n or constants[f"{split}_size"]
    problems = task.problems(split, size)
    started = time.perf_counter()
    tokenizer, model = load_checkpoint(checkpoint)
    generating = time.perf_counter()
    texts = generate(tokenizer, model, problems, constants["max_new_tokens"], constants["batch_size"])
    result = {"split": split, **score(texts, problems)}
    result["generation_seconds"] = round(time.perf_counter() - generating, 3)
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Score a checkpoint on a held-out split.")
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--n", type=int, default=None, help="number of problems (default: constants.toml)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    result = evaluate(args.checkpoint, args.split, args.n)
    args.out.write_text(json.dumps(result))
    print(f"{args.split}: {result['mean']:.4f} ± {result['stderr']:.4f} (n={result['n']})")


if __name__ == "__main__":
    main()
