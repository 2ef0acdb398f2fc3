"""The morning report: one session, read back from MLflow, as Markdown and self-contained HTML.

Written to ``<session>/report/`` (``report.md`` with its PNGs beside it, ``report.html``
with the PNGs embedded) and logged to the session's MLflow run under ``report/``. Every
number in it comes from the tracking store — the same data `autorl show --json` prints —
and the ``train.py`` diff of the winner from its node folder.
"""

from __future__ import annotations

import base64
import html
from collections import Counter
from pathlib import Path

from autorl.storage.report import NO_GAIN, path_share
from autorl.views import figures
from search.importance import MIN_STAGES
from search.tree import schedule_text


def fmt(value, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def best_path_nodes(data: dict) -> list[dict]:
    by_id = {n["id"]: n for n in data["nodes"]}
    return [by_id[i] for i in data["best"]["path"]] if data.get("best") else []


def summary_lines(data: dict) -> list[str]:
    best = data.get("best")
    spent = (f"{data['stages_spent']} stages, {data.get('train_steps_spent', 0)} GRPO training steps in "
             f"{(data.get('seconds') or 0) / 60:.1f} min")
    lines = [f"**Topic:** {data.get('topic')}",
             f"**Template:** `{data.get('template')}` · **strategy:** `{data.get('strategy')}` · {spent}",
             f"**Status:** {data.get('status')} — {data.get('reason') or ''}"]
    if data.get("memory"):
        lines.append(f"**Memory:** {data['memory']}")
    if data.get("seed_noise"):
        lines.append(f"**Seed noise:** {data['seed_noise']}")
    if best:
        lines.append(f"**Winner:** {best['id']} ({' › '.join(['base', *best['path']])}): validation "
                     f"{fmt(best['val_score'])} ± {fmt(best['val_stderr'])}, test {fmt(best.get('test_score'))} "
                     f"± {fmt(best.get('test_stderr'))}; base model validation {fmt(data.get('base_score'))}, "
                     f"test {fmt(data.get('base_test_score'))}")
        if share := path_share(best.get("path_steps", 0), data.get("train_steps_spent")):
            lines.append(f"**Compute:** {share}; the rest trained stages off it.")
        if data.get("beats_base") is False:
            lines.append(f"**No gain:** {NO_GAIN}.")
    else:
        lines.append("**Winner:** none — no stage was scored")
    return lines


def schedule_table(path_nodes: list[dict]) -> list[str]:
    if not path_nodes:
        return ["No winning schedule."]
    names = list(path_nodes[0]["hyperparameters"])
    rows = ["| stage | node | " + " | ".join(names) + " | validation |", "|" + "---|" * (len(names) + 3)]
    for index, node in enumerate(path_nodes, start=1):
        values = [f"{v:.3g}" if isinstance(v, float) else str(v) for v in node["hyperparameters"].values()]
        rows.append(f"| {index} | {node['id']} | " + " | ".join(values) + f" | {fmt(node['val_score'])} |")
    return rows


def findings_table(data: dict) -> list[str]:
    counts = Counter((f["name"], f["severity"]) for n in data["nodes"] for f in n.get("diagnosis", []))
    if not counts:
        return ["No pathology was found in any stage."]
    rows = ["| finding | severity | stages |", "|---|---|---|"]
    rows += [f"| {name} | {severity} | {count} |" for (name, severity), count in counts.most_common()]
    return rows


def nodes_table(data: dict) -> list[str]:
    rows = ["| node | from | status | validation | schedule | MLflow run |", "|---|---|---|---|---|---|"]
    for node in data["nodes"]:
        score = f"{fmt(node['val_score'])} ± {fmt(node['val_stderr'])}" if node["val_score"] is not None else \
            node["reason"][:60].replace("|", "/")
        rows.append(f"| {node['id']} | {node['parent'] or 'base'} | {node['status']} | {score} | "
                    f"{schedule_text(node['hyperparameters'])} | `{node['mlflow_run_id']}` |")
    return rows


def usage_lines(data: dict) -> list[str]:
    llm = {k.removeprefix("llm_"): v for k, v in (data.get("counters") or {}).items() if k.startswith("llm_")}
    search = {k: v for k, v in (data.get("counters") or {}).items() if not k.startswith("llm_")}
    lines = []
    if llm.get("total_tokens"):
        lines.append(f"LLM: {llm.get('calls', 0):.0f} calls, {llm['total_tokens']:.0f} tokens "
                     f"({llm.get('cached_tokens', 0):.0f} cached), ${llm.get('cost', 0.0):.4f}")
    else:
        lines.append("LLM: none used.")
    if search:
        lines.append("Search counters: " + ", ".join(f"{k} {v:g}" for k, v in sorted(search.items())))
    if data.get("overhead_share") is not None:
        lines.append(f"Time outside GRPO steps and evaluation generation: {data['overhead_share']:.0%} of the session.")
    return lines


def importance_lines(data: dict) -> list[str]:
    importance = data.get("importance")
    if not importance:
        return [f"Not estimated: fewer than {MIN_STAGES} stages were scored against a scored parent.", ""]
    return ["Each parameter's share of the variance of a stage's gain over its parent (Optuna's fANOVA over the "
            "session's scored stages; with few stages, a rough guide).", ""]


def build_markdown(data: dict, images: dict[str, Path | None], diff: str) -> str:
    def image(key: str, caption: str) -> list[str]:
        return [f"![{caption}]({images[key].name})", ""] if images.get(key) else []

    parts = [f"# Session {data['name']}", "", *[line + "  " for line in summary_lines(data)],
             f"MLflow session run: `{data['mlflow_run_id']}`", "",
             "## Progress", "", *image("progress", "best validation so far"),
             "## The search tree", "", *image("tree", "search tree"),
             "## The winning schedule", "", *schedule_table(best_path_nodes(data)), "",
             *image("schedule", "winning schedule"),
             "## Which knobs mattered", "", *importance_lines(data), *image("importance", "parameter importance"),
             "## Validation and test", "", *image("gap", "validation and test"),
             "The test split is scored once, at the end, for the winner and the base model only.", "",
             "## What diagnosis found", "", *findings_table(data), "",
             "## Usage", "", *usage_lines(data), "",
             "## Every stage", "", *nodes_table(data), "",
             "## train.py of the winner, against the template", "",
             "```diff", diff.strip() or "(unchanged: the winner ran the template's train.py)", "```", ""]
    return "\n".join(parts)


STYLE = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 7px}"
         "th{background:#f2f2f2}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}")


def markdown_to_html(text: str, images: dict[str, Path | None], title: str) -> str:
    """The Markdown report as one self-contained HTML page (markdown-it-py, CommonMark with
    tables), the figures embedded so the file can be mailed or opened anywhere."""
    from markdown_it import MarkdownIt

    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    body = renderer.render(text)
    for image in (p for p in images.values() if p):
        data = base64.b64encode(image.read_bytes()).decode()
        body = body.replace(f'src="{image.name}"', f'src="data:image/png;base64,{data}"')
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n{body}</body></html>\n")


def write_report(data: dict, session_dir: Path, diff: str = "") -> dict[str, Path]:
    """Draw the figures and write report.md and report.html under ``session_dir/report``."""
    folder = session_dir / "report"
    folder.mkdir(parents=True, exist_ok=True)
    path_nodes = best_path_nodes(data)
    images = {
        "progress": figures.progress(data, folder / "progress.png"),
        "tree": figures.tree(data, folder / "tree.png"),
        "schedule": figures.schedule(path_nodes, folder / "schedule.png"),
        "gap": figures.val_test_gap(data, folder / "val_test.png"),
        "importance": figures.importance(data, folder / "importance.png"),
    }
    markdown = build_markdown(data, images, diff)
    (folder / "report.md").write_text(markdown)
    (folder / "report.html").write_text(markdown_to_html(markdown, images, f"autorl session {data['name']}"))
    return {"markdown": folder / "report.md", "html": folder / "report.html",
            **{key: value for key, value in images.items() if value}}


def best_diff(tracker, data: dict) -> str:
    """The best node's train.py diff, from its run's artifacts."""
    import tempfile

    best = data.get("best")
    if not best:
        return ""
    with tempfile.TemporaryDirectory() as scratch:
        try:
            return Path(tracker.client.download_artifacts(best["mlflow_run_id"], "train_py.diff", scratch)).read_text()
        except Exception:  # noqa: BLE001 - a node recorded without one (a failed record) shows none
            return ""


def report_session(tracker, name: str, session_dir: Path) -> dict[str, Path]:
    """Write a session's report from the tracking store into ``session_dir/report``, log it
    to the session's run under ``report/`` and put its summary in the run's description
    (what MLflow's UI shows first)."""
    from autorl.storage.records import stored_config
    from autorl.storage.report import show_session

    data = show_session(tracker, name)
    config = stored_config(tracker.find_session(name))
    if config is None:
        from autorl.errors import SessionError

        raise SessionError(f"session {name!r} was made by an older autorl: no report")
    paths = write_report(data, session_dir, best_diff(tracker, data))
    tracker.log_artifacts(data["mlflow_run_id"], list(paths.values()), "report")
    tracker.set_tags(data["mlflow_run_id"], {"mlflow.note.content": "\n\n".join(summary_lines(data))})
    return paths
