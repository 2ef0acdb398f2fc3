"""docs/llm-prompt.md: one complete prompt, as autorl renders it now, from a real session.

    .venv/bin/python scripts/llm_prompt_example.py --capture NAME --runs-dir DIR  # record a session's tree
    .venv/bin/python scripts/llm_prompt_example.py                                # render docs/llm-prompt.md
    .venv/bin/python scripts/llm_prompt_example.py --check                        # differs from the code? exit 1

The recorded session (docs/llm-prompt-session.json) holds what the prompt is built from:
the tree read back from MLflow, each node's curve summary and train.py diff, and the budget
text. Rendering uses the same ContextBuilder as a session, so a change to what the LLM sees
shows up here, and the suite's check fails until this page is regenerated.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autorl.analysis.curves import curves_text, read_records, summarise_curves  # noqa: E402
from autorl.stages import template as templates  # noqa: E402
from search.context import ContextBuilder, PromptView, identical_prefix_share  # noqa: E402
from search.policy import BestFirstPolicy  # noqa: E402
from search.tree import Node, Tree  # noqa: E402

SESSION = ROOT / "docs" / "llm-prompt-session.json"
PAGE = ROOT / "docs" / "llm-prompt.md"
MAX_DEPTH = 3


def capture(name: str, runs_dir: Path) -> None:
    from autorl.resume import rebuild_tree, stored_config
    from autorl.storage.tracking import Tracker

    tracker = Tracker.for_runs_dir(runs_dir)
    run = tracker.find_session(name)
    config = stored_config(run)
    tree = rebuild_tree(tracker, run)
    nodes = config.session_dir / "nodes"
    record = {
        "template": config.template, "topic": config.topic, "stages": config.stages,
        "base_score": tree.base_score, "base_stderr": tree.base_stderr,
        "nodes": [node.to_dict() for node in tree.nodes.values()],
        "curves": {n: curves_text(summarise_curves(read_records(nodes / n / "metrics.jsonl"))) for n in tree.nodes},
        "diffs": {},
    }
    SESSION.write_text(json.dumps(record, indent=1) + "\n")


def prompt_after(record: dict, count: int) -> tuple[str, str]:
    """The system and user messages of the proposal that followed the session's first ``count`` nodes."""
    from autorl.session import template_noise
    from autorl.trainer_options import edit_options_text

    template = templates.load(record["template"])
    tree = Tree(record["base_score"], record["base_stderr"])
    for data in record["nodes"][:count]:
        tree.add(Node.from_dict(data))
    context = ContextBuilder(template.program, record["topic"], template.space,
                             curves=lambda node_id: record["curves"].get(node_id, "(no metrics)"),
                             train_py=(template.path / "train.py").read_text(),
                             diff=lambda commit: record["diffs"].get(commit, ""), noise=template_noise(template),
                             max_depth=MAX_DEPTH, hybrid=True,
                             train_size=template.constants.get("stage", {}).get("train_size"),
                             completions_per_step=template.constants.get("stage", {}).get("completions_per_step"),
                             trl_version=metadata.version("trl"),
                             edit_options=edit_options_text((template.path / "train.py").read_text()))
    stages = record["stages"] * 2
    view = PromptView(suggested=BestFirstPolicy(MAX_DEPTH, min_roots=1).select(tree, stages - count, stages),
                      expandable=[None] + [n.id for n in tree.scored() if context.extendable(n)],  # the LLM's rules
                      budget=f"{count} of {stages} stages spent")
    system, user = (m["content"] for m in context.messages(tree, view))
    return system, user


def render() -> str:
    record = json.loads(SESSION.read_text())
    count = len(record["nodes"])
    system, user = prompt_after(record, count)
    sequence = [prompt_after(record, k)[1] for k in range(count + 1)]
    share = identical_prefix_share(sequence)
    return (f"# What the LLM sees\n\nThe prompt of a `hybrid` proposal after the {count} stages of a real "
            f"`{record['template']}` session ({SESSION.relative_to(ROOT)}), as the code renders it now "
            f"(`scripts/llm_prompt_example.py`; a test checks that this page is current). About "
            f"{(len(system) + len(user)) // 4:,} tokens. Over the {count + 1} proposals of that session, "
            f"{share:.0%} of each user message repeats the start of the one before (what a provider's prompt "
            f"cache can serve; the system message is identical in all).\n\n"
            f"## System message\n\n````markdown\n{system}\n````\n\n## User message\n\n````markdown\n{user}\n````\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", metavar="NAME")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.capture:
        capture(args.capture, args.runs_dir)
    page = render()
    if args.check:
        return 0 if PAGE.exists() and PAGE.read_text() == page else 1
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
