"""The trainer options an edit of ``train.py`` can set, as the installed TRL defines them.

An LLM that edits ``train.py`` needs to know which GRPOConfig arguments exist in the
installed TRL and what they default to: an argument of another version is a crash, and
a default the script never overrides (the learning-rate schedule, clipping, how rewards
are scaled) is invisible in the script itself. The values are read from the installed
packages' source without importing them (importing TRL takes seconds and a GPU probe).
Only options that change what GRPO does are listed; the ones ``train.py`` already
passes are left out, since the script shows them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from importlib import metadata

# (distribution, source file, dataclass) that define GRPOConfig's fields
SOURCES = (("trl", "trl/trainer/grpo_config.py", "GRPOConfig"),
           ("transformers", "transformers/training_args.py", "TrainingArguments"))

# options that change how a GRPO stage learns, in the order a researcher reaches for them
# (sampling filters such as top_p or repetition_penalty are left out: they change what the
# rollouts are, which the evaluator's decoding does not share, and the prompt has little room)
RELEVANT = ("lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay", "max_grad_norm", "adam_beta2",
            "num_iterations", "epsilon", "epsilon_high", "delta", "scale_rewards", "mask_truncated_completions",
            "top_entropy_quantile", "steps_per_generation")
HELP_CHARS = 150
# What TRL's help does not say: the PPO-style clip acts on the ratio of the policy being updated to
# the one that sampled, which is 1 when each generation feeds one optimizer step once.
INERT_WITHOUT_REUSE = ("epsilon", "epsilon_high", "delta")
REUSE_NOTE = ("inert while each batch of completions trains one optimizer step once (num_iterations 1 and "
              "steps_per_generation equal to gradient_accumulation_steps, the defaults): the ratio is then 1")


@dataclass(frozen=True)
class Option:
    name: str
    default: str  # as the source writes it
    help: str  # its first sentence


def installed_options() -> dict[str, Option]:
    """Every field of the installed GRPOConfig (and the TrainingArguments it extends) by name;
    empty when the packages or their sources cannot be read."""
    found: dict[str, Option] = {}
    for dist, relative, class_name in reversed(SOURCES):  # GRPOConfig's own default wins
        try:
            source = metadata.distribution(dist).locate_file(relative).read_text()
        except (metadata.PackageNotFoundError, OSError):
            continue
        found |= fields_of(ast.parse(source), class_name)
    return found


def fields_of(module: ast.Module, class_name: str) -> dict[str, Option]:
    classes = [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == class_name]
    options = {}
    for statement in classes[0].body if classes else []:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            options[statement.target.id] = option_of(statement.target.id, statement.value)
    return options


def option_of(name: str, value: ast.expr) -> Option:
    """A dataclass field's default and help, from ``field(default=..., metadata={"help": ...})``."""
    if not isinstance(value, ast.Call):
        return Option(name, ast.unparse(value), "")
    keywords = {k.arg: k.value for k in value.keywords}
    default = keywords.get("default")
    text = ""
    meta = keywords.get("metadata")
    if isinstance(meta, ast.Dict):
        for key, item in zip(meta.keys, meta.values):
            if isinstance(key, ast.Constant) and key.value == "help" and isinstance(item, ast.Constant):
                text = str(item.value)
    return Option(name, ast.unparse(default) if default is not None else "(computed)", first_sentence(text))


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
    return sentence if len(sentence) <= HELP_CHARS else sentence[: HELP_CHARS - 1] + "…"


def edit_options_text(train_py: str, options: dict[str, Option] | None = None) -> str:
    """One line per relevant option the installed version has and ``train.py`` does not pass."""
    options = installed_options() if options is None else options
    lines = []
    for name in RELEVANT:
        if name in options and not re.search(rf"\b{name}\s*=", train_py):
            option = options[name]
            note = f" ({REUSE_NOTE})" if name in INERT_WITHOUT_REUSE else ""
            lines.append(f"  - `{name}` = {option.default}" + (f": {option.help}" if option.help else "") + note)
    return "\n".join(lines)
