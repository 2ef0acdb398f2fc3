"""Write a template from a data file: everything checked first, the folder appears whole or not at all."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from autorl.errors import DataFileError
from autorl.own_task import module_from_file
from autorl.own_task.fields import ANSWER_NAMES, PROMPT_NAMES, pick_field
from autorl.own_task.rewards import RewardSpec, check_on_rows, parse_reward
from autorl.own_task.sizing import (
    Device,
    ModelFacts,
    completion_budget,
    completion_choices,
    learning_rates,
    model_facts,
    this_device,
    wants_lora,
)

SKELETON = Path(__file__).resolve().parent / "skeleton"
DEFAULT_VALIDATION, DEFAULT_TEST = 200, 500  # capped at a tenth and a fifth of a smaller file
TAG = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


@dataclass(frozen=True)
class FromData:
    """What `autorl init DIR --from-data FILE` was asked."""

    file: Path
    base_model: str
    prompt_field: str | None = None
    answer_field: str | None = None
    system: str = ""
    reward: str = "exact"
    format_tag: str | None = None
    val_size: int | None = None
    test_size: int | None = None


@dataclass(frozen=True)
class Made:
    """What was written, for the one-paragraph summary the CLI prints."""

    fields: tuple[str, str]
    counts: dict  # rows, empty, duplicates, train, validation, test
    reward: str
    model: str
    facts: ModelFacts
    lora: bool
    device: Device

    def summary(self, directory: Path) -> str:
        c = self.counts
        return (f"wrote {directory}: {c['rows']} rows ({c['duplicates']} duplicate and {c['empty']} empty dropped) -> "
                f"train {c['train']}, validation {c['validation']}, test {c['test']}; prompt field "
                f"{self.fields[0]!r}, answer field {self.fields[1]!r}; reward: {self.reward}; base model "
                f"{self.model} ({self.facts.size_text()} parameters, "
                f"{'LoRA' if self.lora else 'full fine-tuning'} on this {self.device.describe()})")


def prepare_module():
    """The generated template's own env/prepare.py: the split it ships is the split it can rebuild."""
    return module_from_file(SKELETON / "env" / "prepare.py", "autorl_own_task_prepare")


def create_from_data(directory: Path, options: FromData) -> Made:
    """Check the file, the fields, the reward, the splits and the model; then write the template."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise DataFileError(f"{directory} already exists and is not an empty folder; name a new one")
    if options.format_tag is not None and not TAG.fullmatch(options.format_tag):
        raise DataFileError(f"--format-tag {options.format_tag!r}: a tag is a name like 'answer' (letters, digits, "
                            "'_' and '-')")
    reward = parse_reward(options.reward)
    prepare = prepare_module()
    try:
        rows = prepare.read_table(options.file)
        columns = prepare.columns_of(rows)
        fields = (pick_field(columns, options.prompt_field, PROMPT_NAMES, "prompt", "--prompt-field", options.file),
                  pick_field(columns, options.answer_field, ANSWER_NAMES, "answer", "--answer-field", options.file))
        items, counts = prepare.unique_items(rows, *fields)
        if not items:
            raise DataFileError(f"{options.file}: no row has both a {fields[0]!r} and an {fields[1]!r}")
        sizes = split_sizes(len(items), options)
        parts = prepare.split(items, *sizes)
    except prepare.DataError as error:
        raise DataFileError(str(error)) from None
    check_on_rows(reward, parts["train"] + parts["validation"])
    partial = directory.with_name(f".{directory.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        made = write_template(partial, options, reward, fields, parts, counts, prepare)
        if directory.exists():
            directory.rmdir()
        partial.rename(directory)
        return made
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def split_sizes(distinct: int, options: FromData) -> tuple[int, int]:
    """--val-size and --test-size, else 200 and 500 capped at a tenth and a fifth of the file."""
    validation = options.val_size if options.val_size is not None else min(DEFAULT_VALIDATION, max(1, distinct // 10))
    test = options.test_size if options.test_size is not None else min(DEFAULT_TEST, max(1, distinct // 5))
    for name, size in (("--val-size", validation), ("--test-size", test)):
        if size < 1:
            raise DataFileError(f"{name} {size}: a held-out split needs at least one item")
    return validation, test


def write_template(folder: Path, options: FromData, reward: RewardSpec, fields: tuple[str, str],
                   parts: dict[str, list[dict]], counts: dict, prepare) -> Made:
    from transformers import AutoTokenizer

    from autorl.models import install_base_model
    from autorl.stages import template as templates

    shutil.copytree(SKELETON, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "env" / "constants.toml").write_text('[model]\nbase_model = "base_model"\n')
    model = install_base_model(folder, options.base_model)
    source = tomllib.loads((folder / "env" / "constants.toml").read_text())["model"]
    tokenizer = AutoTokenizer.from_pretrained(folder / "env" / "base_model")
    facts, device = model_facts(folder / "env" / "base_model", tokenizer), this_device()
    lora = wants_lora(facts, device)
    budget = completion_budget([len(tokenizer(item["answer"], add_special_tokens=False)["input_ids"])
                                for item in parts["train"] + parts["validation"]])
    (folder / "env" / "task.toml").write_text(task_toml(options, reward, fields, parts, facts.chat))
    check_lengths(folder, parts, tokenizer, facts, max(completion_choices(budget)))
    prepare.write_splits(parts, counts, folder / "env" / "data")
    if reward.kind == "python":
        shutil.copyfile(reward.file, folder / "env" / "custom_reward.py")
    (folder / "env" / "constants.toml").write_text(
        constants_toml(source, len(parts["train"]), len(parts["validation"]), len(parts["test"]), budget, device,
                       facts, options.format_tag is not None))
    (folder / "space.toml").write_text(space_toml(facts, lora, budget, device))
    made = Made(fields, {**counts, **{name: len(part) for name, part in parts.items()}}, reward.describe(), model,
                facts, lora, device)
    (folder / "program.md").write_text(program_md(options, made))
    templates.load(str(folder))  # the whole contract, as a session will check it
    return made


def check_lengths(folder: Path, parts: dict[str, list[dict]], tokenizer, facts: ModelFacts, completion: int) -> None:
    """Every prompt, as the model will read it, fits its context with the longest completion."""
    if not facts.context:
        return
    task = module_from_file(folder / "env" / "task.py", f"autorl_own_task_{os.getpid()}")
    longest, too_long = 0, 0
    for item in (i for part in parts.values() for i in part):
        prompt = task.chat(item["prompt"])
        if isinstance(prompt, list):  # as the evaluator reads it: the chat template's text, its tokens
            text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            tokens = len(tokenizer(prompt)["input_ids"])
        longest = max(longest, tokens)
        too_long += tokens + completion > facts.context
    if too_long:
        raise DataFileError(f"{too_long} prompts do not fit the model's context: the longest takes {longest} tokens "
                            f"as the model reads it, and the model reads {facts.context} less {completion} for the "
                            "completion; shorten or drop them")




def toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def task_toml(options: FromData, reward: RewardSpec, fields: tuple[str, str], parts: dict, chat: bool) -> str:
    table = reward.settings(options.format_tag)
    reward_lines = "\n".join(f"{key} = {toml_string(value)}" for key, value in table.items())
    return (f"# FROZEN. What `autorl init --from-data` made of {options.file.name}; env/task.py reads it.\n\n"
            f"system = {toml_string(options.system)}\n"
            f"# Prompts go through the model's chat template (false: the model has none; plain text).\n"
            f"chat = {'true' if chat else 'false'}\n\n"
            f"[fields]\nsource = {toml_string(options.file.name)}\n"
            f"prompt = {toml_string(fields[0])}\nanswer = {toml_string(fields[1])}\n\n"
            f"[splits]\nvalidation = {len(parts['validation'])}\ntest = {len(parts['test'])}\n\n"
            f"[reward]\n{reward_lines}\n")


def constants_toml(source: dict, train: int, validation: int, test: int, budget: int, device: Device,
                   facts: ModelFacts, tagged: bool) -> str:
    per_step, micro = (64, 16) if device.gpu else (32, 8)
    wall = 3600 if device.gpu else max(1200, round(1200 * facts.parameters / 135e6))
    high = 1.25 if tagged else 1.0  # env/task.py's FORMAT_BONUS
    return f"""# FROZEN. Constants of the task `autorl init --from-data` generated; the controller hashes this file.

[model]
base_model = "base_model"
source = {toml_string(str(source.get('source', '')))}
revision = {toml_string(str(source.get('revision', '')))}

[stage]
# Wall-clock budget of one training stage, enforced by the executor (seconds).
wall_seconds = {wall}
# Training prompts a stage may draw: the whole train split.
train_size = {train}
# Completions per optimizer step (prompts x num_generations), divisible by every num_generations choice.
completions_per_step = {per_step}
# Completions per forward/backward pass: bounds the memory of a step.
micro_batch = {micro}

[gpu]
# Share of GPU memory vLLM may take when it generates inside the training process.
vllm_memory_share = 0.3

[reward]
# The range of a completion's total reward (the score in [0, 1], plus the format bonus when a tag is asked for).
low = 0.0
high = {high}

[eval]
validation_size = {validation}
test_size = {test}
# The most tokens a greedy reply may take (the default completion budget of space.toml).
max_new_tokens = {budget}
batch_size = {64 if device.gpu else 50}
# auto: vLLM on CUDA when installed, else Hugging Face generate; or "hf" / "vllm".
engine = "auto"
vllm_memory_share = 0.5
"""


def space_toml(facts: ModelFacts, lora: bool, budget: int, device: Device) -> str:
    low, high, default = learning_rates(facts.parameters, lora)
    steps = [10, 20, 40] if device.gpu else [5, 10, 15]
    ranks = "[16, 32]\ndefault = 16" if lora else "[0, 16]\ndefault = 0"
    return f"""# The hyperparameter space of one stage, sized by `autorl init --from-data` for a
# {facts.size_text()}-parameter model on a {device.describe()} (autorl/own_task/sizing.py says how).
# Narrow or widen it as you learn the task; docs/templates.md has the rules.

[learning_rate]
type = "float"
low = {low:g}
high = {high:g}
log = true
default = {default:g}
help = "AdamW learning rate of the stage{' (of the LoRA adapter)' if lora else ''}."

[beta]
type = "categorical"
choices = [0.0, 0.01, 0.04]
default = 0.0
help = "KL coefficient against the stage's starting policy; 0 loads no reference model."

[temperature]
type = "float"
low = 0.4
high = 1.1
default = 0.7
help = "Sampling temperature of the rollouts."

[num_generations]
type = "categorical"
choices = [4, 8]
default = 4
help = "Completions per prompt (the GRPO group size)."

[max_completion_length]
type = "categorical"
choices = {completion_choices(budget)}
default = {budget}
help = "Token cap of a completion in training; the evaluator's is {budget} ([eval] max_new_tokens)."

[loss_type]
type = "categorical"
choices = ["dapo", "grpo", "dr_grpo"]
default = "dapo"
help = "TRL's GRPO loss normalisation."

[lora_rank]
type = "categorical"
choices = {ranks}
help = "0 trains every weight; otherwise a LoRA adapter of this rank on all linear layers, merged into the checkpoint."

[max_steps]
type = "categorical"
choices = {steps}
default = {steps[1]}
help = "Optimizer steps in this stage."
"""


def program_md(options: FromData, made: Made) -> str:
    c = made.counts
    return f"""# Research brief: {options.file.stem}

Generated by `autorl init --from-data {options.file.name}`; edit it before the first session.

What was generated:
- Data: {c['rows']} rows of `{options.file.name}` ({c['duplicates']} duplicate prompts and {c['empty']} empty rows
  dropped), split by a hash of the normalised prompt into train {c['train']}, validation {c['validation']} and
  test {c['test']} (`env/data/`, rebuilt by `python env/prepare.py --source FILE`). The prompt is the
  `{made.fields[0]}` field{', after the system prompt in env/task.toml' if options.system else ''}; the answer is
  `{made.fields[1]}`.
- Reward (frozen, `env/task.py`): {made.reward}{tag_text(options.format_tag)}.
  The same function scores training rollouts and the evaluator's greedy replies: the score
  that counts is its mean on validation; the test split is used once, at the end.
- Policy: {made.model} ({made.facts.size_text()} parameters), trained by TRL's `GRPOTrainer` in `train.py`,
  one stage at a time, {'with a LoRA adapter' if made.lora else 'every weight'}.

What you should add (the search reads this file; it states only what you know before searching):
- What the task is, and what a good answer looks like.
- What is known about this model on this task, measured, with where it was measured
  (its base score, how it fails, what sampling temperature gives varied rewards).
- What to look for: the pathologies that would worry you on this task.

Leave out what an earlier search on this template measured: memory carries it to every
strategy alike (`--memory on`, the default).
"""


def tag_text(tag: str | None) -> str:
    return f", judged inside <{tag}>...</{tag}>, with a 0.25 bonus for using the tag" if tag else ""
