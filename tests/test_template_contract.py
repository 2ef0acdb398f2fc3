"""Each rule of docs/templates.md, broken once: a one-line error that names the file and the fix."""

import json
import shutil

import pytest
from conftest import make_template

from autorl.errors import ContractError, TemplateError
from autorl.stages import template as templates
from autorl.stages.evaluate import read_eval_output


def write(relative, text):
    def change(root):
        path = root / relative
        if path.exists():
            path.chmod(0o644)
        path.write_text(text)
    return change


def remove(relative):
    def change(root):
        target = root / relative
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    return change


def remove_weights(root):
    for path in (root / "env" / "base_model").glob("*.safetensors"):
        path.unlink()


def set_json(relative, **values):
    def change(root):
        path = root / relative
        data = json.loads(path.read_text()) | values
        path.chmod(0o644)
        path.write_text(json.dumps(data))
    return change


BROKEN = {
    "missing file": (remove("env/evaluate.py"), "missing env/evaluate.py"),
    "train.py syntax": (write("train.py", "def broken(:\n"), "train.py line 1"),
    "evaluator syntax": (write("env/evaluate.py", "x = = 1\n"), "env/evaluate.py line 1"),
    "empty brief": (write("program.md", "  \n"), "program.md is empty"),
    "constants not TOML": (write("env/constants.toml", "[model\n"), "env/constants.toml is not valid TOML"),
    "constants without stage": (write("env/constants.toml", '[model]\nbase_model = "base_model"\n'),
                                "env/constants.toml lacks 'stage'"),
    "negative wall budget": (write("env/constants.toml",
                                   '[model]\nbase_model = "base_model"\n[stage]\nwall_seconds = -1\n'),
                             "wall_seconds = -1 is not a positive number"),
    "negative stage noise": (write("env/constants.toml", '[model]\nbase_model = "base_model"\n[stage]\n'
                                                         'wall_seconds = 9\n[noise]\nstage_sd = -0.1\n'),
                             "[noise] stage_sd = -0.1 is not a non-negative number"),
    "base model folder missing": (remove("env/base_model"), "not found (no config.json)"),
    "empty config.json": (write("env/base_model/config.json", ""), "config.json is not valid JSON"),
    "config.json without model_type": (write("env/base_model/config.json", "{}"), "has no model_type"),
    "remote code": (set_json("env/base_model/config.json", auto_map={"AutoModel": "x.Y"}), "asks for remote code"),
    "no safetensors": (remove_weights, "has no .safetensors weights"),
    "space not TOML": (write("space.toml", "[lr\n"), "space.toml is not a valid search space: Expected"),
    "empty space": (write("space.toml", "# nothing\n"), "space.toml defines no hyperparameter"),
    "bad bounds": (write("space.toml", '[lr]\ntype = "float"\nlow = 1\nhigh = 0\ndefault = 0.5\n'),
                   "[lr] lr: needs numeric low < high"),
    "non-numeric default": (write("space.toml", '[lr]\ntype = "float"\nlow = 0\nhigh = 1\ndefault = "x"\n'),
                            "[lr] low, high and default must be numbers"),
    "no stage length": (write("space.toml", '[lr]\ntype = "float"\nlow = 0\nhigh = 1\ndefault = 0.5\n'),
                        'no stage length: give the parameter that sets GRPO steps `role = "steps"`'),
    "unknown role": (write("space.toml", '[lr]\ntype = "float"\nlow = 0\nhigh = 1\ndefault = 0.5\nrole = "speed"\n'),
                     "[lr] lr: unknown role 'speed'"),
    "one role twice": (write("space.toml", '[a]\ntype = "int"\nlow = 1\nhigh = 9\ndefault = 2\nrole = "steps"\n'
                                           '[b]\ntype = "int"\nlow = 1\nhigh = 9\ndefault = 2\nrole = "steps"\n'),
                       "a and b both have role 'steps'"),
}


def test_roles_make_any_names_work(tmp_path):
    root = make_template(tmp_path / "tpl")
    write("space.toml", '[peak_lr]\ntype = "float"\nlow = 1e-6\nhigh = 1e-3\nlog = true\ndefault = 1e-5\n'
                        'role = "learning_rate"\n[updates]\ntype = "int"\nlow = 2\nhigh = 40\ndefault = 8\n'
                        'role = "steps"\n[max_steps]\ntype = "int"\nlow = 1\nhigh = 2\ndefault = 1\nrole = ""\n')(root)
    template = templates.load(str(root))
    assert template.space.roles == {"learning_rate": "peak_lr", "steps": "updates"}
    assert template.stage_steps({"peak_lr": 1e-4, "updates": 12, "max_steps": 2}) == 12


def test_a_fixed_stage_length_in_constants_needs_no_steps_parameter(tmp_path):
    root = make_template(tmp_path / "tpl")
    write("space.toml", '[lr]\ntype = "float"\nlow = 0\nhigh = 1\ndefault = 0.5\n')(root)
    constants = root / "env" / "constants.toml"
    constants.chmod(0o644)
    constants.write_text(constants.read_text().replace("[stage]\n", "[stage]\nmax_steps = 6\n"))
    assert templates.load(str(root)).stage_steps({"lr": 0.1}) == 6


@pytest.mark.parametrize("rule", BROKEN)
def test_a_broken_rule_is_one_line_naming_the_file(rule, tmp_path):
    change, fragment = BROKEN[rule]
    root = make_template(tmp_path / "tpl")
    change(root)
    with pytest.raises(TemplateError) as caught:
        templates.load(str(root))
    message = str(caught.value)
    assert fragment in message and str(root) in message and "\n" not in message


def test_the_built_in_template_keeps_the_contract():
    assert templates.load("arith").space.params


GOOD = {"mean": 0.5, "stderr": 0.05, "n": 2, "items": [{"id": "a", "correct": 1}, {"id": "b", "correct": 0}]}


@pytest.mark.parametrize("output, fragment", [
    ("not json", "unreadable JSON"),
    ([1, 2], "not a JSON object"),
    ({k: v for k, v in GOOD.items() if k != "stderr"}, "no numeric 'stderr'"),
    (GOOD | {"mean": "high"}, "no numeric 'mean'"),
    (GOOD | {"items": [{"correct": 1}]}, "with 'id' and 'correct'"),
    (GOOD | {"items": [{"id": "a"}]}, "with 'id' and 'correct'"),
    (GOOD | {"items": [{"id": "a", "correct": 1}, {"id": "a", "correct": 0}]}, "not unique"),
])
def test_evaluator_output_that_breaks_the_contract(output, fragment, tmp_path):
    path = tmp_path / "eval_validation.json"
    path.write_text(output if isinstance(output, str) else json.dumps(output))
    with pytest.raises(ContractError, match="env/evaluate.py broke the template contract") as caught:
        read_eval_output(path)
    assert fragment in str(caught.value)


def test_evaluator_output_that_keeps_it(tmp_path):
    path = tmp_path / "eval_validation.json"
    path.write_text(json.dumps(GOOD))
    assert read_eval_output(path)["mean"] == 0.5


def test_extra_evaluator_numbers_are_kept_and_bad_ones_dropped():
    from autorl.stages.evaluate import extra_metrics

    data = {"mean": 0.5, "stderr": 0.1, "n": 10, "items": [], "seconds": 1.0, "format_rate": 0.9, "by_digits/3": 0.4,
            "flag": True, "nan": float("nan"), "name with spaces": 1.0, "note": "text"}
    assert extra_metrics(data) == {"by_digits/3": 0.4, "format_rate": 0.9}


def test_extra_evaluator_numbers_reach_mlflow_and_the_proposers_context():
    from autorl.storage.records import node_metrics
    from search.context import ContextBuilder
    from search.tree import Node, Status, Tree

    node = Node("n001", None, 1, {"learning_rate": 1e-5}, seed=1, proposer="tree", status=Status.SUCCEEDED,
                val_score=0.6, val_stderr=0.02, eval_metrics={"format_rate": 0.93})
    assert node_metrics(node)["val_format_rate"] == 0.93
    context = ContextBuilder("brief", "topic", templates.load("arith").space, curves=lambda node_id: "")
    assert "format_rate 0.93" in context.node_line(Tree(base_score=0.5), node)
