"""Build the digitsort base model and tokenizer from nothing, deterministically.

FROZEN. The result ships prebuilt in ``env/base_model/`` (about 3.5 MB), so a session
never runs this; it exists so anyone can rebuild and check the shipped model:

    python env/prepare.py --out /tmp/base_model

Recipe: a byte-level BPE tokenizer with single-digit tokens, a 4-layer Llama of
~0.9 M parameters, and a short supervised warm-up (plain torch, completion-only loss,
one torch thread) on training-split problems only: AdamW, batch 64, the learning rate
rising linearly to 2e-4 over 20 steps and then constant, gradients clipped to norm 1,
stopped at the first step after which greedy decoding sorts 55% of a probe exactly: 2,000
training-split strings outside the warm-up pool (never validation or test), scored from
one teacher-forced pass. That is about 100 steps, and the model then sorts about 58% of
the validation strings exactly, so that GRPO has something to learn.

Why a stop on the probe and not a step count: sorting is learned in one steep rise
(exact match goes from 5% to 90% within ~40 steps), and where that rise starts depends on
the data order and the floating-point path. The previous recipe (95 steps at a constant
2e-3) scored 0.599 where it was built, and 0.618, 0.677 and 0.692 with data orders 1-3,
0.659 with portable (non-AVX) kernels. A cosine decay to zero, which makes the arith
recipe path-independent, ends sorting runs tightly only once they are at 85-97% (measured:
0.878, 0.867, 0.884 for three data orders at T=80, lr 1e-3), and at ~60% their spread
was 0.55-0.66 (batch 256, T=60). Stopping on the probe ends every run at the same
accuracy, whenever the rise came; the low learning rate keeps the overshoot past the
target small (about 2 points a step). Measured (benchmarks/results/base_model_spread.md,
on an AVX2 EPYC, torch 2.13): 1, 2 and 4 threads give the shipped weights bit for bit;
data orders 1-3 score 0.604, 0.589 and 0.593 and portable kernels 0.577, against the
shipped 0.577 ± 0.016 (data orders 0, 1, 2 stop after 99, 100 and 96 steps). About a
minute on one core.
``--data-seed`` changes the warm-up data order only (the model's initialisation stays seed
0); ``--threads`` the torch threads; ``--steps`` caps the warm-up.
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
BATCH_SIZE = 64
LEARNING_RATE = 2e-4  # constant after LR_WARMUP_STEPS of linear warm-up
LR_WARMUP_STEPS = 20
GRAD_CLIP = 1.0
THREADS = 1
# Stop once greedy decoding sorts TARGET_ACCURACY of the probe exactly: PROBE_SIZE training-split
# strings outside the warm-up pool (never validation or test), checked after every step once a
# training batch shows CHECK_FROM exact (the probe is cheap to skip while far below the target).
TARGET_ACCURACY = 0.55
PROBE_SIZE = 2000
PROBE_SEED_OFFSET = 7
CHECK_FROM = 0.3
MAX_STEPS = 400


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


def learning_rate(step: int) -> float:
    """Linear warm-up over LR_WARMUP_STEPS, then constant."""
    return LEARNING_RATE * min(1.0, (step + 1) / LR_WARMUP_STEPS)


def collate(tokenizer, batch: list[tuple[list[int], int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input ids, completion-only labels and the attention mask."""
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), tokenizer.pad_token_id)
    labels = torch.full((len(batch), width), -100)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, start) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, start : len(ids)] = torch.tensor(ids[start:])
        attention[row, : len(ids)] = 1
    return input_ids, labels, attention


def answered(logits: torch.Tensor, labels: torch.Tensor, eos_token_id: int) -> torch.Tensor:
    """Per example: would greedy decoding write the whole answer? From one teacher-forced pass.

    Greedy decoding writes the target iff the argmax at every target position is the target
    token; the end-of-sequence token after ``</answer>`` is not needed for the answer to count.
    """
    predicted, target = logits.argmax(-1)[:, :-1], labels[:, 1:]
    checked = (target != -100) & (target != eos_token_id)
    return ((predicted == target) | ~checked).all(dim=1)


@torch.no_grad()
def exact_match(model, tokenizer, encoded: list[tuple[list[int], int]], chunk: int = 250) -> float:
    """Share of the examples whose answer greedy decoding gets right."""
    model.eval()
    right = 0
    for start in range(0, len(encoded), chunk):
        input_ids, labels, attention = collate(tokenizer, encoded[start : start + chunk])
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        right += int(answered(logits, labels, tokenizer.eos_token_id).sum())
    model.train()
    return right / len(encoded)


def warm_up(model, tokenizer, steps: int = MAX_STEPS, data_seed: int = SEED) -> int:
    """Supervised warm-up (plain torch loop, completion-only loss) until the probe's target; returns its steps."""
    torch.manual_seed(SEED)
    rng = random.Random(data_seed)
    pool = task.problems("train", 20000)
    in_pool = {p["digits"] for p in pool}
    probe = [p for p in task.problems("train", PROBE_SIZE + 2000, seed_offset=PROBE_SEED_OFFSET)
             if p["digits"] not in in_pool][:PROBE_SIZE]
    probe_encoded = [encode_example(tokenizer, p) for p in probe]
    encoded: dict[int, tuple[list[int], int]] = {}  # pool index -> encoding, each encoded once
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    near = False
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step)
        picked = rng.sample(range(len(pool)), BATCH_SIZE)  # the same draws as rng.sample(pool, ...)
        for i in picked:
            if i not in encoded:
                encoded[i] = encode_example(tokenizer, pool[i])
        input_ids, labels, attention = collate(tokenizer, [encoded[i] for i in picked])
        output = model(input_ids=input_ids, attention_mask=attention, labels=labels)
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad()
        loss = output.loss
        # The probe costs several steps' compute: it is checked after every step only from the
        # first batch that the model (from this step's own logits, for free) got CHECK_FROM of.
        near |= answered(output.logits.detach(), labels, tokenizer.eos_token_id).float().mean().item() >= CHECK_FROM
        accuracy = exact_match(model, tokenizer, probe_encoded) if near else None
        if step % 10 == 0 or step == steps - 1 or accuracy is not None and accuracy >= TARGET_ACCURACY:
            shown = f"  probe {accuracy:.3f}" if accuracy is not None else ""
            print(f"step {step:4d}  loss {loss.item():.4f}{shown}", flush=True)
        if accuracy is not None and accuracy >= TARGET_ACCURACY:
            break
    model.eval()
    return step + 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "base_model")
    parser.add_argument("--steps", type=int, default=MAX_STEPS, help="the most warm-up steps")
    parser.add_argument("--data-seed", type=int, default=SEED, help="seed of the warm-up data order")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch intra-op threads (the recipe's: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    steps = warm_up(model, tokenizer, args.steps, args.data_seed)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    print(f"saved base model to {args.out} after {steps} warm-up steps")


if __name__ == "__main__":
    main()
