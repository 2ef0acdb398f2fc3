"""GRPO on your task: one training stage of a pretrained model, run by autorl.

This is the file autorl edits. `autorl init --from-data` wrote it; it is a plain TRL
``GRPOTrainer`` script:

    python train.py --spec spec.json

The spec (written by the controller) names the checkpoint to start from, where to
write, this stage's hyperparameters, the step budget and the seed. The prompts, the
training split and the reward functions come from the frozen ``env/task.py``. The
script uses the hardware it is given: on CUDA it trains in bf16 with gradient
checkpointing and, when vLLM is installed, generates rollouts with vLLM inside the
training process (TRL's colocate mode); on a CPU it trains in fp32 with Hugging Face
``generate``. With ``lora_rank > 0`` it trains a LoRA adapter and merges it, so every
checkpoint is a full model the next stage and the evaluator load alike.

It streams every logged step to ``metrics_path`` (TRL's own keys), saves the policy as
safetensors under ``<output_dir>/checkpoint`` and ends with a ``---`` footer of
``key: value`` lines. It never scores itself.
"""

import argparse
import importlib.util
import json
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from env import task  # noqa: E402


class ConstantGroups:
    """The share of prompt groups whose completions all got the same total reward, from the
    per-completion rewards with a tolerance: TRL's ``frac_reward_zero_std`` compares a
    float32 std with zero and misses groups whose rewards are not exact in binary."""

    def __init__(self, reward_funcs, group_size: int):
        self.group_size = group_size
        self.batch: list[list[float]] = []  # each reward function's values for the batch being scored
        self.fractions: list[float] = []
        self.funcs = [self.watch(func) for func in reward_funcs]

    def watch(self, func):
        def reward(completions, **kwargs):
            values = func(completions, **kwargs)
            self.batch.append([0.0 if v is None else float(v) for v in values])
            if len(self.batch) == len(self.funcs):
                self.close_batch()
            return values

        reward.__name__ = func.__name__  # TRL logs rewards/<name>/mean
        return reward

    def close_batch(self) -> None:
        totals = [sum(values) for values in zip(*self.batch)]
        self.batch = []
        groups = [totals[i:i + self.group_size] for i in range(0, len(totals), self.group_size)]
        if groups:
            constant = [max(g) - min(g) <= 1e-6 * max(1.0, *map(abs, g)) for g in groups]
            self.fractions.append(sum(constant) / len(constant))

    def take(self) -> float | None:
        """The mean share since the last call (None when nothing was scored)."""
        fractions, self.fractions = self.fractions, []
        return sum(fractions) / len(fractions) if fractions else None


class JsonlMetrics(TrainerCallback):
    """Append every log TRL emits to a JSON-lines file, flushed at once."""

    def __init__(self, path: Path, groups: ConstantGroups):
        self.path = path
        self.groups = groups
        self.last: dict = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        record = {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
        if "grad_norm" in record:  # the clip the norm is measured against (the diagnosis reads both)
            record["max_grad_norm"] = args.max_grad_norm
        if "reward" in record:
            constant = self.groups.take()
            if constant is not None:
                record["frac_reward_constant"] = constant
            self.last = record
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


def hardware() -> dict:
    """What this machine offers: the device, bf16, and whether vLLM can generate."""
    cuda = torch.cuda.is_available()
    return {"device": "cuda" if cuda else "cpu", "bf16": cuda and torch.cuda.is_bf16_supported(),
            "vllm": cuda and importlib.util.find_spec("vllm") is not None}


def build_config(spec: dict, constants: dict, hw: dict) -> GRPOConfig:
    hp = spec["hyperparameters"]
    cuda = hw["device"] == "cuda"
    # completions per optimizer step, trained micro_batch at a time: the logits of a whole
    # step at once (completions x tokens x vocabulary) can outgrow the trial's memory
    per_step = constants["stage"]["completions_per_step"]
    micro = min(constants["stage"].get("micro_batch", per_step), per_step)
    return GRPOConfig(
        output_dir=str(Path(spec["output_dir"]) / "trainer"),
        learning_rate=hp["learning_rate"],
        beta=hp["beta"],
        temperature=hp["temperature"],
        num_generations=hp["num_generations"],
        max_completion_length=hp["max_completion_length"],
        loss_type=hp["loss_type"],
        max_steps=spec["max_steps"],
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=per_step // micro,
        seed=spec["seed"],
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not cuda,
        bf16=hw["bf16"],
        fp16=False,
        gradient_checkpointing=cuda,
        use_vllm=hw["vllm"],
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=constants["gpu"]["vllm_memory_share"],
        disable_tqdm=True,
    )


def lora_config(rank: int):
    if rank == 0:
        return None
    if importlib.util.find_spec("peft") is None:
        raise SystemExit(f"lora_rank={rank} needs the peft package (scripts/setup installs it); "
                         "without it keep lora_rank = 0 in space.toml")
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")


def main() -> None:
    parser = argparse.ArgumentParser(description="One GRPO stage on the task.")
    parser.add_argument("--spec", type=Path, required=True)
    spec = json.loads(parser.parse_args().spec.read_text())
    started = time.time()
    constants = tomllib.loads((HERE / "env" / "constants.toml").read_text())
    hw = hardware()

    tokenizer = AutoTokenizer.from_pretrained(spec["init_checkpoint"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        spec["init_checkpoint"], use_safetensors=True, dtype=torch.bfloat16 if hw["bf16"] else torch.float32)
    dataset = Dataset.from_list(task.problems("train", constants["stage"]["train_size"], seed_offset=spec["seed"]))
    groups = ConstantGroups(task.reward_funcs(), spec["hyperparameters"]["num_generations"])
    metrics = JsonlMetrics(Path(spec["metrics_path"]), groups)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=groups.funcs,
        args=build_config(spec, constants, hw),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[metrics],
        peft_config=lora_config(int(spec["hyperparameters"].get("lora_rank", 0))),
    )
    trainer.train()

    policy = trainer.model
    if hasattr(policy, "merge_and_unload"):  # a LoRA adapter: fold it into the weights
        policy = policy.merge_and_unload()
    checkpoint = Path(spec["output_dir"]) / "checkpoint"
    policy.save_pretrained(checkpoint, safe_serialization=True)
    tokenizer.save_pretrained(checkpoint)

    print("---")
    print("status: ok")
    print(f"steps: {trainer.state.global_step}")
    print(f"train_reward: {metrics.last.get('reward', float('nan')):.4f}")
    print(f"device: {hw['device']}")
    print(f"generation: {'vllm' if hw['vllm'] else 'hf'}")
    print(f"seconds: {time.time() - started:.1f}")
    print(f"checkpoint: {checkpoint}")


if __name__ == "__main__":
    main()
