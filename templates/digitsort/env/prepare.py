"""Build the digitsort base model and tokenizer from nothing, deterministically.

FROZEN. The result ships prebuilt in ``env/base_model/`` (about 3.5 MB), so a session
never runs this; it exists so anyone can rebuild and check the shipped model:

    python env/prepare.py --out /tmp/base_model

Recipe: a byte-level BPE tokenizer with single-digit tokens, a 4-layer Llama of
~0.9 M parameters, and a short supervised warm-up (plain torch, completion-only loss)
on training-split problems only, stopped after 95 steps while the model sorts about
60% of the validation strings exactly, so that GRPO has something to learn.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from env import task  # noqa: E402

SPECIAL_TOKENS = ["<|pad|>", "<|eos|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}<|user|>{{ message['content'] }}"
    "{% elif message['role'] == 'assistant' %}<|assistant|>{{ message['content'] }}<|eos|>"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SEED = 0
WARMUP_STEPS = 95
BATCH_SIZE = 64
LEARNING_RATE = 2e-3


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with digits split one per token; answer tags as plain tokens."""
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + len(SPECIAL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(["0123456789 sort <answer></answer>"], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        pad_token="<|pad|>",
        eos_token="<|eos|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )
    # Non-special, so they survive decode(skip_special_tokens=True) as TRL uses it.
    tokenizer.add_tokens(["<answer>", "</answer>"])
    return tokenizer


def build_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def encode_example(tokenizer, problem: dict) -> tuple[list[int], int]:
    """Token ids of prompt + target completion, and where the completion starts."""
    prompt = tokenizer.apply_chat_template(problem["prompt"], add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(task.target_text(problem["answer"]) + tokenizer.eos_token, add_special_tokens=False)[
        "input_ids"
    ]
    return prompt_ids + target_ids, len(prompt_ids)


def warm_up(model, tokenizer, steps: int = WARMUP_STEPS) -> None:
    """Supervised warm-up with a plain torch loop and completion-only loss."""
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    pool = task.problems("train", 20000)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    for step in range(steps):
        batch = [encode_example(tokenizer, p) for p in rng.sample(pool, BATCH_SIZE)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, start) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, start : len(ids)] = torch.tensor(ids[start:])
            attention[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)
    model.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "base_model")
    parser.add_argument("--steps", type=int, default=WARMUP_STEPS)
    args = parser.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    warm_up(model, tokenizer, args.steps)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    print(f"saved base model to {args.out}")


if __name__ == "__main__":
    main()
