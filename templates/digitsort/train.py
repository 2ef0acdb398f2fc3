"""GRPO on sorting six digits: one training stage, run by autorl as an experiment.

This is the file autorl edits. It is a plain TRL ``GRPOTrainer`` script:

    python train.py --spec spec.json

The spec (written by the controller) names the checkpoint to start from, where to
write, this stage's hyperparameters, the step budget and the seed. The script streams
every logged step to ``metrics_path`` as one JSON object per line (TRL's own keys),
saves the policy as safetensors under ``<output_dir>/checkpoint`` and ends with a
``---`` footer of ``key: value`` lines. A missing footer means the run crashed.

It never scores itself: the controller evaluates the checkpoint with the frozen
evaluator on data this script cannot see.
"""

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from env import task  # noqa: E402


class RolloutStats:
    """What TRL does not log about the rollouts, from each reward function's per-completion values:
    the share of prompt groups whose completions all got the same total reward (TRL's
    ``frac_reward_zero_std`` compares a float32 std with zero and misses groups whose rewards
    are not exact in binary), and the share of completions exactly right (correctness 1.0):
    the evaluator's metric at the sampling temperature, which a partial-credit reward's mean is not."""

    def __init__(self, reward_funcs, group_size: int):
        self.group_size = group_size
        self.correctness = [func.__name__ for func in reward_funcs].index("correctness_reward")
        self.batch: list[list[float]] = []  # each reward function's values for the batch being scored
        self.constant: list[float] = []
        self.exact: list[float] = []
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
        correctness = self.batch[self.correctness]
        self.batch = []
        if correctness:
            self.exact.append(sum(value >= 1.0 for value in correctness) / len(correctness))
        groups = [totals[i:i + self.group_size] for i in range(0, len(totals), self.group_size)]
        if groups:
            constant = [max(g) - min(g) <= 1e-6 * max(1.0, *map(abs, g)) for g in groups]
            self.constant.append(sum(constant) / len(constant))

    def take(self) -> dict:
        """The mean shares since the last call (none when nothing was scored)."""
        shares = {"frac_reward_constant": self.constant, "exact_match": self.exact}
        self.constant, self.exact = [], []
        return {name: sum(values) / len(values) for name, values in shares.items() if values}


class JsonlMetrics(TrainerCallback):
    """Append every log TRL emits to a JSON-lines file, flushed at once."""

    def __init__(self, path: Path, rollouts: RolloutStats):
        self.path = path
        self.rollouts = rollouts
        self.last: dict = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        record = {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
        if "grad_norm" in record:  # the clip the norm is measured against (the diagnosis reads both)
            record["max_grad_norm"] = args.max_grad_norm
        if "reward" in record:
            record.update(self.rollouts.take())
            self.last = record
        with self.path.open("a") as handle:
            handle.write(json.dumps(record) + "\n")


def build_config(spec: dict, constants: dict) -> GRPOConfig:
    hp = spec["hyperparameters"]
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
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="One GRPO stage on the digitsort task.")
    parser.add_argument("--spec", type=Path, required=True)
    spec = json.loads(parser.parse_args().spec.read_text())
    started = time.time()
    constants = tomllib.loads((HERE / "env" / "constants.toml").read_text())

    tokenizer = AutoTokenizer.from_pretrained(spec["init_checkpoint"])
    model = AutoModelForCausalLM.from_pretrained(spec["init_checkpoint"], use_safetensors=True)
    dataset = Dataset.from_list(task.problems("train", constants["stage"]["train_size"], seed_offset=spec["seed"]))
    rollouts = RolloutStats(task.REWARD_FUNCS, spec["hyperparameters"]["num_generations"])
    metrics = JsonlMetrics(Path(spec["metrics_path"]), rollouts)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rollouts.funcs,
        args=build_config(spec, constants),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[metrics],
    )
    trainer.train()

    checkpoint = Path(spec["output_dir"]) / "checkpoint"
    trainer.model.save_pretrained(checkpoint, safe_serialization=True)
    tokenizer.save_pretrained(checkpoint)

    print("---")
    print("status: ok")
    print(f"steps: {trainer.state.global_step}")
    print(f"train_reward: {metrics.last.get('reward', float('nan')):.4f}")
    print(f"seconds: {time.time() - started:.1f}")
    print(f"checkpoint: {checkpoint}")


if __name__ == "__main__":
    main()
