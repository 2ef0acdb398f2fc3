"""Score a checkpoint on a held-out split of your task: greedy replies, judged by the task's own reward.

FROZEN. Run by the controller, never by the experiment:

    python env/evaluate.py --checkpoint DIR --split validation --out eval.json

The checkpoint is loaded from safetensors with ``trust_remote_code=False``. Decoding is
greedy, so a score is a function of the checkpoint. Each item's ``correct`` is
``task.score`` of its reply, the function that rewards training rollouts. The engine is
vLLM on a CUDA machine where it is installed (and ``[eval] engine`` allows it), else
Hugging Face ``generate``; the engine is written with the score.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from env import task  # noqa: E402


def load_constants() -> dict:
    return tomllib.loads((HERE / "constants.toml").read_text())


def choose_engine(preference: str) -> str:
    """``vllm`` when asked for or allowed (``auto``) and usable here; else ``hf``."""
    import torch

    usable = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
    if preference == "vllm" and not usable:
        raise SystemExit("[eval] engine = 'vllm' needs CUDA and the vllm package")
    return "vllm" if preference in ("auto", "vllm") and usable else "hf"


def prompts_of(tokenizer, problems: list[dict]) -> list[str]:
    """Chat prompts through the model's chat template; plain-text prompts as they are."""
    return [tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False)
            if isinstance(p["prompt"], list) else p["prompt"] for p in problems]


def generate_hf(checkpoint: Path, problems: list[dict], max_new_tokens: int, batch_size: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=False)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(checkpoint, use_safetensors=True, trust_remote_code=False,
                                                 dtype=dtype).to(device).eval()
    chat = isinstance(problems[0]["prompt"], list) if problems else True
    texts: list[str] = []
    with torch.no_grad():
        for start in range(0, len(problems), batch_size):
            encoded = tokenizer(prompts_of(tokenizer, problems[start:start + batch_size]), return_tensors="pt",
                                padding=True, add_special_tokens=not chat).to(device)
            output = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id)
            texts += tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1]:], skip_special_tokens=True)
    return texts


def generate_vllm(checkpoint: Path, problems: list[dict], max_new_tokens: int, memory_share: float) -> list[str]:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=False)
    llm = LLM(model=str(checkpoint), trust_remote_code=False, gpu_memory_utilization=memory_share, seed=0,
              enforce_eager=True)
    outputs = llm.generate(prompts_of(tokenizer, problems), SamplingParams(temperature=0.0, max_tokens=max_new_tokens))
    return [output.outputs[0].text for output in outputs]


def score(texts: list[str], problems: list[dict]) -> dict:
    """The mean score with its standard error, and per-item results keyed by item id. The
    format rate is the share of replies the reward could read an answer from."""
    tag = task.settings()["reward"].get("tag")
    items = [{"id": p["id"], "answer": p["answer"], "completion": text, "correct": task.score(text, p["answer"]),
              "formatted": int(task.answer_part(text, tag) is not None and bool(text.strip()))}
             for p, text in zip(problems, texts)]
    n = len(items)
    mean = sum(item["correct"] for item in items) / n
    variance = sum((item["correct"] - mean) ** 2 for item in items) / (n - 1) if n > 1 else 0.0
    return {"n": n, "mean": mean, "stderr": math.sqrt(variance / n),
            "format_rate": sum(i["formatted"] for i in items) / n, "items": items}


def evaluate(checkpoint: Path, split: str) -> dict:
    if split == "train":
        raise ValueError("the evaluator scores held-out splits only (validation or test)")
    constants = load_constants()["eval"]
    problems = task.problems(split, constants[f"{split}_size"])
    engine = choose_engine(constants.get("engine", "auto"))
    started = time.perf_counter()
    if engine == "vllm":
        texts = generate_vllm(checkpoint, problems, constants["max_new_tokens"], constants["vllm_memory_share"])
    else:
        texts = generate_hf(checkpoint, problems, constants["max_new_tokens"], constants["batch_size"])
    return {"split": split, "engine": engine, **score(texts, problems),
            "seconds": round(time.perf_counter() - started, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Score a checkpoint on a held-out split of the task.")
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    result = evaluate(args.checkpoint, args.split)
    args.out.write_text(json.dumps(result))
    print(f"{args.split}: {result['mean']:.4f} ± {result['stderr']:.4f} (n={result['n']}, engine {result['engine']})")


if __name__ == "__main__":
    main()
