"""`autorl init DIR --from-data FILE`: a template from the user's own prompts and answers.

Files the suite writes: the built-in word problems exported as JSONL (SmolLM2-135M-Instruct,
`--reward last-number`), and a CSV scored by a Python function inside an answer tag. Bad
input gets one line and creates nothing."""

import csv
import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import REPO, narrow_space, run_cli, set_constants

SMOLLM = REPO / "templates" / "wordproblems" / "env" / "base_model"

REWARD_PY = '''
def near(completion, answer):
    """1 for the answer, a half for one off, else 0."""
    try:
        got = int(completion.strip())
    except ValueError:
        return 0.0
    return 1.0 if got == int(answer) else 0.5 if abs(got - int(answer)) == 1 else 0.0
'''


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def wordproblems_jsonl(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "wordproblems.jsonl"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "own_task.py"), "--export-only", str(path)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    rows = path.read_text().splitlines()
    extra = [json.loads(rows[0]), json.loads(rows[1])]
    extra[0]["question"] = "  " + extra[0]["question"].upper() + "  "  # the same prompt, shouted: a duplicate
    extra[1]["answer"] = None  # no answer: dropped as empty
    path.write_text("\n".join(rows + [json.dumps(e) for e in extra]) + "\n")
    return path


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "sums.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["q", "a", "note"])
        for a in range(2, 30):
            for b in range(2, 8):
                writer.writerow([f"What is {a} plus {b}? Put the number in <answer></answer>.", a + b, "x"])
    (tmp_path / "reward.py").write_text(REWARD_PY)
    return path


def init(folder, data, *options):
    return run_cli("init", str(folder), "--from-data", str(data), "--base-model", str(SMOLLM), *options)


def test_a_jsonl_of_word_problems_becomes_a_template_that_keeps_the_contract(wordproblems_jsonl, tmp_path,
                                                                             monkeypatch):
    done = init(tmp_path / "wp", wordproblems_jsonl, "--reward", "last-number")
    assert done.returncode == 0, done.stderr
    printed = " ".join(done.stdout.split())
    assert "2585 rows (1 duplicate and 1 empty dropped) -> train 1883, validation 200, test 500" in printed
    assert "prompt field 'question', answer field 'answer'" in printed and "full fine-tuning" in printed
    from autorl.stages import template as templates

    template = templates.load(str(tmp_path / "wp"))
    assert template.eval_token_cap == 32 and template.space.params["max_completion_length"].choices == [24, 32, 48]
    splits = {name: [json.loads(line) for line in (tmp_path / "wp" / "env" / "data" / f"{name}.jsonl").open()]
              for name in ("train", "validation", "test")}
    ids = [{item["id"] for item in part} for part in splits.values()]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    task = load(tmp_path / "wp" / "env" / "task.py", "wp_task")
    first = task.problems("validation", 1)[0]
    assert first["prompt"] == [{"role": "user", "content": splits["validation"][0]["prompt"]}]
    assert task.correctness_reward(["Tom has 3 + 4 = 7 apples.", "Tom has 7 apples and 8."], ["7", "7"]) == [1.0, 0.0]
    monkeypatch.setattr(sys, "path", list(sys.path))  # evaluate.py imports its own `env` package, not
    for name in ("env", "env.task"):                  # another template's that an earlier test imported
        monkeypatch.delitem(sys.modules, name, raising=False)
    evaluate = load(tmp_path / "wp" / "env" / "evaluate.py", "wp_evaluate")
    scored = evaluate.score(["It is 12.", "no idea"], [{"id": "a", "answer": "12"}, {"id": "b", "answer": "3"}])
    assert [i["correct"] for i in scored["items"]] == [1.0, 0.0] and scored["mean"] == 0.5  # the reward's own metric
    rebuilt = subprocess.run([sys.executable, str(tmp_path / "wp" / "env" / "prepare.py"), "--source",
                              str(wordproblems_jsonl), "--out", str(tmp_path / "again")],
                             capture_output=True, text=True)
    assert rebuilt.returncode == 0, rebuilt.stderr
    for name in ("train", "validation", "test"):  # prepare.py rebuilds exactly what the template ships
        assert (tmp_path / "again" / f"{name}.jsonl").read_text() == \
            (tmp_path / "wp" / "env" / "data" / f"{name}.jsonl").read_text()


@pytest.mark.slow  # a template made with the model (seconds): the edit loop keeps the JSONL one
def test_a_csv_scored_by_a_python_function_inside_an_answer_tag(csv_file, tmp_path):
    reward = f"python:{csv_file.parent / 'reward.py'}:near"
    done = init(tmp_path / "sums", csv_file, "--prompt-field", "q", "--answer-field", "a", "--reward", reward,
                "--format-tag", "answer", "--system", "You add numbers.", "--val-size", "20", "--test-size", "30")
    assert done.returncode == 0, done.stderr
    assert "train 118, validation 20, test 30" in " ".join(done.stdout.split())
    folder = tmp_path / "sums"
    assert (folder / "env" / "custom_reward.py").read_text() == REWARD_PY  # frozen with the rest of env/
    task = load(folder / "env" / "task.py", "sums_task")
    assert task.problems("test", 1)[0]["prompt"][0] == {"role": "system", "content": "You add numbers."}
    replies = ["<answer>9</answer>", "<answer>10</answer>", "9", "<answer>x</answer>"]
    assert task.correctness_reward(replies, ["9"] * 4) == [1.0, 0.5, 0.0, 0.0]
    assert task.format_reward(replies) == [0.25, 0.25, 0.0, 0.25]
    assert [f.__name__ for f in task.reward_funcs()] == ["correctness_reward", "format_reward"]
    constants = (folder / "env" / "constants.toml").read_text()
    assert "high = 1.25" in constants and "test_size = 30" in constants


def bad_inputs(tmp_path, csv_file) -> dict:
    """Each bad input: (data file, init options, what the one line says)."""
    fields = ["--prompt-field", "q", "--answer-field", "a"]
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "bad.py").write_text("def divide(c, a):\n    return 1 / 0\n\ndef word(c, a):\n    return 'yes'\n")
    (tmp_path / "long.jsonl").write_text(json.dumps({"prompt": "word " * 9000, "answer": "1"}) + "\n"
                                         + "".join(json.dumps({"prompt": f"p{i}", "answer": "1"}) + "\n"
                                                   for i in range(20)))
    return {
        "missing": (tmp_path / "nope.jsonl", fields, "no such file"),
        "empty": (tmp_path / "empty.csv", fields, "the file is empty"),
        "unknown_field": (csv_file, ["--prompt-field", "question_text"],
                          "has no column 'question_text' (--prompt-field); its columns: q, a, note"),
        "no_guess": (csv_file, [], "no column looks like the prompt"),
        "bad_regex": (csv_file, [*fields, "--reward", "regex:(unclosed"], "the pattern does not compile"),
        "raises": (csv_file, [*fields, "--reward", f"python:{tmp_path / 'bad.py'}:divide"],
                   "raised ZeroDivisionError"),
        "not_a_number": (csv_file, [*fields, "--reward", f"python:{tmp_path / 'bad.py'}:word"], "returned 'yes'"),
        "too_small": (csv_file, [*fields, "--val-size", "100", "--test-size", "68"], "the train split would be empty"),
        "too_long": (tmp_path / "long.jsonl", [], "prompts do not fit the model's context"),
        "unknown_reward": (csv_file, [*fields, "--reward", "fuzzy"], "choose one of exact, last-number"),
    }


OPTION_FIELDS = {"--prompt-field": "prompt_field", "--answer-field": "answer_field", "--reward": "reward",
                 "--val-size": "val_size", "--test-size": "test_size"}


@pytest.mark.parametrize("case", ["missing", "empty", "unknown_field", "no_guess", "bad_regex", "raises",
                                  "not_a_number", "too_small", "too_long", "unknown_reward"])
def test_bad_input_is_refused_before_anything_is_made(case, csv_file, tmp_path):
    """In-process, as the CLI calls it (the CLI's own line is checked below)."""
    from autorl.errors import DataFileError
    from autorl.own_task.build import FromData, create_from_data

    data, options, expected = bad_inputs(tmp_path, csv_file)[case]
    pairs = dict(zip(options[::2], options[1::2]))
    asked = {OPTION_FIELDS[k]: int(v) if k.endswith("size") else v for k, v in pairs.items()}
    with pytest.raises(DataFileError) as refused:
        create_from_data(tmp_path / "made", FromData(data, str(SMOLLM), **asked))
    assert expected in str(refused.value) and "\n" not in str(refused.value)
    assert not (tmp_path / "made").exists() and not list(tmp_path.glob(".made.partial-*"))


@pytest.mark.parametrize(("case", "expected"), [
    ("raises", "raised ZeroDivisionError"),
    ("no_model", "--from-data needs --base-model"),
    ("no_file", "--reward describes a data file: add --from-data FILE"),
])
def test_bad_input_gets_one_line_from_the_cli_and_creates_nothing(case, expected, csv_file, tmp_path):
    folder = tmp_path / "made"
    if case == "no_model":
        done = run_cli("init", str(folder), "--from-data", str(csv_file), "--prompt-field", "q")
    elif case == "no_file":
        done = run_cli("init", str(folder), "--reward", "last-number")
    else:
        data, options, _ = bad_inputs(tmp_path, csv_file)[case]
        done = init(folder, data, *options)
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip()
    assert expected in " ".join(message.split()), message
    assert len(message.splitlines()) <= 2 and "Traceback" not in message  # one line (a long one may wrap)
    assert not folder.exists() and not list(tmp_path.glob(".made.partial-*"))


@pytest.mark.slow
def test_research_runs_a_generated_template(csv_file, tmp_path, runs_dir):
    reward = f"python:{csv_file.parent / 'reward.py'}:near"
    made = init(tmp_path / "sums", csv_file, "--prompt-field", "q", "--answer-field", "a", "--reward", reward,
                "--format-tag", "answer", "--val-size", "8", "--test-size", "8")
    assert made.returncode == 0, made.stderr
    # smaller stages than the generated ones, for the suite's time only (benchmarks/own_task.py runs one unchanged)
    narrow_space(tmp_path / "sums", {"num_generations": "[4]", "max_steps": "[2]"})
    set_constants(tmp_path / "sums", completions_per_step=4, micro_batch=2)
    done = run_cli("research", "sums from a CSV", "--template", str(tmp_path / "sums"), "--train-steps", "2",
                   "--memory", "off", "--name", "sums", timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warning" not in (done.stdout + done.stderr).lower()
    data = json.loads(run_cli("show", "sums", "--json").stdout)
    assert [n["status"] for n in data["nodes"]] == ["succeeded"] and data["best_test_score"] is not None
    assert data["nodes"][0]["steps"] == 2


@pytest.mark.slow  # a template made with the model (seconds): the edit loop keeps the JSONL one
def test_a_parquet_file_is_read_with_its_fields_guessed(tmp_path):
    from datasets import Dataset

    rows = [{"Problem": f"What is {a} times 3?", "Solution": a * 3, "source": "made"} for a in range(40)]
    Dataset.from_list(rows).to_parquet(str(tmp_path / "times.parquet"))
    done = init(tmp_path / "times", tmp_path / "times.parquet", "--reward", "regex:(-?\\d+)")
    assert done.returncode == 0, done.stderr
    assert "prompt field 'Problem', answer field 'Solution'" in " ".join(done.stdout.split())
    task = load(tmp_path / "times" / "env" / "task.py", "times_task")
    assert task.correctness_reward(["3 times 3 is 9", "it is 9 or 10"], ["9", "9"]) == [1.0, 0.0]  # the last match
