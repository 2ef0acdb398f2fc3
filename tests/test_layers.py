"""The architecture holds by construction: import rules (pyproject's import-linter
contracts) and a sandbox package that loads nothing but the standard library."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept():
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def loaded_after(statement: str) -> set[str]:
    """Top-level modules a fresh interpreter loads for ``statement`` beyond its own start-up."""
    code = ("import sys; before = set(sys.modules); " + statement + "; import json; "
            "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_importing_sandbox_loads_only_the_standard_library():
    third_party = {m for m in loaded_after("import sandbox") if m not in sys.stdlib_module_names} - {"sandbox"}
    assert third_party == set()


def test_the_check_above_can_see_a_third_party_import():
    assert "optuna" in loaded_after("import search.study")
