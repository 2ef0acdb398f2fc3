"""Train 2-step stages of a template from its base model, one per variant of its space, in
one process (TRL is imported once), and print which variants changed the weights.

    python tests/knob_runner.py TEMPLATE_DIR OUT_DIR

Each parameter is moved away from its default (another choice, or the far bound) while
everything else, the seed included, stays the same; the reference is the defaults.
Prints one JSON object: {parameter: true when its weights differ from the reference's}.
"""

import json
import runpy
import sys
import tomllib
from pathlib import Path

from safetensors.torch import load_file

STEPS = 2
STAGE_LENGTH_ROLE = "max_steps"  # the stage's own length: checked by the budget tests, not here


def other_value(param: dict, default):
    if param["type"] == "categorical":
        return next(c for c in param["choices"] if c != default)
    far = param["high"] if default != param["high"] else param["low"]
    return type(default)(far) if param["type"] == "int" else float(far)


def train(template: Path, out: Path, name: str, values: dict) -> dict:
    folder = out / name
    folder.mkdir(parents=True)
    spec = {"node_id": name, "init_checkpoint": str(template / "env" / "base_model"), "output_dir": str(folder),
            "metrics_path": str(folder / "metrics.jsonl"), "hyperparameters": values, "max_steps": STEPS,
            "seed": 7, "wall_seconds": 600}
    (folder / "spec.json").write_text(json.dumps(spec))
    sys.argv = ["train.py", "--spec", str(folder / "spec.json")]
    runpy.run_path(str(template / "train.py"), run_name="__main__")
    return load_file(str(folder / "checkpoint" / "model.safetensors"))


def main() -> None:
    template, out = Path(sys.argv[1]), Path(sys.argv[2])
    space = tomllib.loads((template / "space.toml").read_text())
    defaults = {name: p["default"] for name, p in space.items()}
    reference = train(template, out, "reference", defaults)
    changed = {}
    for name, param in space.items():
        if name == STAGE_LENGTH_ROLE:
            continue
        weights = train(template, out, name, {**defaults, name: other_value(param, defaults[name])})
        changed[name] = any(not weights[k].equal(reference[k]) for k in reference)
    print(json.dumps(changed))


if __name__ == "__main__":
    main()
