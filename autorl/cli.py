"""The ``autorl`` command: a thin layer over the library.

Library errors (AutorlError) become one red line and exit code 1 here, and only here; so
do the usage errors the parser finds (``autorl/usage_errors.py``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from autorl.config import DEFAULT_TEMPLATE, FLAGS, SessionConfig, choices
from autorl.errors import USER_ERRORS, ConfigError, SessionError
from autorl.usage_errors import OneLineErrors

console = Console()
if not console.is_terminal:  # logs and CI: wide enough that tables stay on one line per row
    console = Console(width=140)
err_console = Console(stderr=True)

RunsDir = typer.Option(None, "--runs-dir", envvar="AUTORL_RUNS_DIR",
                       help="Where stores and sessions live [default: ./runs].")
TrackingUri = typer.Option(None, "--tracking-uri", help="MLflow tracking URI [default: sqlite:///<runs-dir>/mlflow.db].")


def cli_errors(func):
    """Turn library errors into one clear line and a non-zero exit, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as exc:
            err_console.print("[bold red]error:[/]", escape(str(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None, cls=OneLineErrors,
                  help="Autonomous research agent for RL post-training.")


def option(field: str, *short: str, **extra) -> typer.models.OptionInfo:
    """A CLI option whose flag (``FLAGS``), default, help and validation are the
    SessionConfig field's: each option is declared once, in the config."""
    info = SessionConfig.model_fields[field]
    flag = FLAGS[field]
    if info.annotation is bool:
        flag = f"{flag}/--no-{flag.removeprefix('--')}"
    if known := choices(field):
        extra.setdefault("metavar", "|".join(known))
    return typer.Option(info.default, flag, *short, help=info.description, **extra)


def open_tracker(runs_dir: Optional[Path], tracking_uri: Optional[str], create: bool = False,
                 session: str | None = None):
    """The runs directory and its tracker; only ``create`` (research) makes either. Without
    ``--tracking-uri``, a ``session``'s folder says which store it was recorded in."""
    from autorl.config import default_runs_dir, prepare_runs_dir
    from autorl.storage.tracking import Tracker, remembered_uri

    runs = (runs_dir or default_runs_dir()).expanduser().resolve()
    if tracking_uri is None and session is not None:
        tracking_uri = remembered_uri(runs, session)
    tracker = Tracker.for_runs_dir(runs, tracking_uri, create=create)
    if create:
        tracker.check_creatable()  # before the runs directory is made: a refusal leaves nothing behind
        prepare_runs_dir(runs)
    return runs, tracker


@app.command()
@cli_errors
def research(
    topic: str = typer.Argument(..., help="The research question, e.g. 'which schedule helps digit sorting most'."),
    template: str = option("template", "-t"),
    train_steps: Optional[int] = option("train_steps"),
    stages: Optional[int] = option("stages", "-n"),
    time_budget: Optional[str] = typer.Option(None, "--time",
                                              help="Wall-clock budget of the whole session, e.g. 30m, 2h."),
    strategy: Optional[str] = typer.Option(
        None, "--strategy", metavar="|".join(choices("strategy")),
        help="How the next stage is proposed; defaults is no search, the control: the space's "
             "default stage down one path for the whole budget [default: llm with --llm, else tree]."),
    seed: int = option("seed"),
    max_depth: Optional[int] = option("max_depth"),
    schedule_prior: bool = option("schedule_prior"),
    local_steps: bool = option("local_steps"),
    leaf_width: Optional[int] = option("leaf_width"),
    ablate: Optional[list[str]] = typer.Option(None, "--ablate", metavar="PART",
                                               help=SessionConfig.model_fields["ablate"].description
                                               + " Repeat for several."),
    sandbox: str = option("sandbox"),
    workers: str = option("workers"),
    trial_memory: float = option("trial_memory_gb"),
    parallel: int = option("parallel", "-j"),
    executor: str = option("executor"),
    ray_address: Optional[str] = option("ray_address", envvar="AUTORL_RAY_ADDRESS"),
    trial_cpus: Optional[float] = option("trial_cpus"),
    target: Optional[float] = option("target"),
    patience: Optional[int] = option("patience"),
    gpus: str = option("gpus"),
    approve: str = option("approve"),
    wait: bool = typer.Option(False, "--wait", help="With --approve: run headless and wait for decisions from "
                                                    "`autorl tui NAME` (attached from another terminal)."),
    name: Optional[str] = typer.Option(None, "--name", help="Session name [default: from topic and time]."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
    study_storage: Optional[str] = option("study_storage", envvar="AUTORL_STUDY_STORAGE"),
    keep_checkpoints: str = option("keep_checkpoints"),
    memory: str = option("memory"),
    noise_probe: str = option("noise_probe"),
    register: Optional[str] = option("register_as"),
    llm: Optional[str] = option("llm_model", envvar="AUTORL_LLM"),
    llm_base_url: Optional[str] = option("llm_base_url", envvar="OPENAI_BASE_URL"),
    llm_key_file: Optional[Path] = typer.Option(None, "--llm-key-file",
                                                help="File holding the API key [default: $OPENAI_API_KEY]."),
    llm_timeout: float = option("llm_timeout_s"),
    max_llm_tokens: Optional[int] = option("max_llm_tokens"),
    llm_prompt_tokens: int = option("llm_prompt_tokens"),
    max_llm_cost: Optional[float] = option("max_llm_cost"),
    llm_reasoning_effort: Optional[str] = option("llm_reasoning_effort"),
    llm_fallback: str = option("llm_fallback"),
):
    """Run a research session: propose, train, score and record stages until the budget is spent."""
    from autorl.config import default_runs_dir, make_config, parse_duration
    from autorl.session import create_session, new_session_name
    from autorl.stages import template as templates
    from autorl.storage.tracking import default_uri
    from search.llm import read_api_key

    check_approve(approve, wait=wait)  # everything is checked before anything is created
    seconds = parse_duration(time_budget) if time_budget else None
    announce_no_llm = strategy is None and not llm
    strategy = strategy or ("llm" if llm else "tree")  # llm measured best of the two (docs/llm.md)
    runs = (runs_dir or default_runs_dir()).expanduser().resolve()
    config = make_config(
        name=name or new_session_name(topic), topic=topic, template=template, train_steps=train_steps, stages=stages,
        time_budget_s=seconds,
        strategy=strategy, seed=seed, max_depth=max_depth, schedule_prior=schedule_prior, local_steps=local_steps,
        leaf_width=leaf_width, ablate=tuple(ablate or ()),
        sandbox=sandbox, workers=workers, trial_memory_gb=trial_memory, parallel=parallel, trial_cpus=trial_cpus,
        executor=executor, ray_address=ray_address,
        gpus=gpus, approve=approve, target=target if target is not None else confirmed_topic_target(topic),
        patience=patience,
        runs_dir=runs, tracking_uri=tracking_uri or default_uri(runs), study_storage=study_storage,
        keep_checkpoints=keep_checkpoints, register_as=register, memory=memory,
        noise_probe=noise_probe,
        llm_model=llm, llm_base_url=llm_base_url, llm_timeout_s=llm_timeout, max_llm_tokens=max_llm_tokens,
        llm_prompt_tokens=llm_prompt_tokens,
        max_llm_cost=max_llm_cost, llm_reasoning_effort=llm_reasoning_effort, llm_fallback=llm_fallback,
    )
    api_key = read_api_key(llm_key_file) if llm else None
    loaded = templates.load(template)
    runs, tracker = open_tracker(runs_dir, tracking_uri, create=True)
    observer, gate = interface(approve, wait)
    controller = create_session(config, loaded, tracker, observer=observer, gate=gate, api_key=api_key)
    if announce_no_llm:
        console.print("[dim]no LLM configured (--llm MODEL): tree search, Optuna TPE steered by diagnosis[/]")
    drive_tui(controller, runs, tracker) if gate and not wait else drive(controller, runs, tracker)


def confirmed_topic_target(topic: str) -> float | None:
    """The target a topic states, if the person at the terminal confirms it (never in scripts)."""
    from autorl.loop.goals import target_in_topic

    target = target_in_topic(topic)
    if target is None:
        return None
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        console.print(f"[dim]the topic states a target of {target:g}; pass --target {target:g} to stop there[/]")
        return None
    return target if typer.confirm(f"The topic states a target: stop when validation reaches {target:g}?",
                                   default=True) else None


def interface(approve: str, wait: bool = False):
    """The observer and gate for an approval mode: the TUI when a person decides here, else
    the live view (with ``wait``, decisions come from a TUI attached with `autorl tui`)."""
    import getpass

    from autorl.loop.approval import Gate

    if approve == "none" or wait:
        from autorl.views.live import LiveView

        return LiveView(console), Gate(approve, decided_by=getpass.getuser()) if wait else None
    from autorl.views.tui import TuiObserver

    return TuiObserver(), Gate(approve, decided_by=getpass.getuser())


def check_approve(mode: str, stored: bool = False, wait: bool = False) -> None:
    from autorl.config import APPROVE_MODES
    from autorl.errors import ConfigError

    if mode not in APPROVE_MODES:
        raise ConfigError(f"--approve: unknown mode {mode!r}; choose one of {', '.join(APPROVE_MODES)}")
    if wait and mode == "none":
        raise ConfigError("--wait: only with --approve edits|all (nothing waits for a decision otherwise)")
    if mode != "none" and not wait and not (sys.stdin.isatty() and sys.stdout.isatty()):
        if stored:
            raise ConfigError(f"--approve: this session was started with --approve {mode}, which needs an interactive "
                              "terminal to ask you; resume it in one, add --wait to decide from `autorl tui NAME`, "
                              "or pass --approve none to go on autonomously")
        raise ConfigError(f"--approve: {mode} needs an interactive terminal to ask you; add --wait to run headless "
                          "and decide from `autorl tui NAME` in another terminal, or run without it (autonomous)")


def drive_tui(controller, runs: Path, tracker) -> None:
    """Run a controller inside the TUI, where proposals wait for a person's decision.

    SIGINT and SIGTERM stop the session as `q` does, however the process was started (a
    handler of its own, as `stop_on_signals` installs for `drive`): the gate's stop request
    is set, the controller interrupts the running stage and ends the session stopped, the
    app leaves, and the exit status is 130. The controller runs in the app's worker thread,
    so raising KeyboardInterrupt here would only break Textual's loop, not stop it."""
    from autorl.views.tui import make_app

    app = make_app(controller)
    signalled: list[int] = []

    def stop(signum, frame):
        signalled.append(signum)
        app.stop_from_signal()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    app.run()
    name = controller.config.name
    console.print(f"session {name}: {controller.status} ({controller.reason})")
    if controller.status == "stopped":
        console.print(f"continue with:  autorl resume {name} --runs-dir {runs}")
    console.print(f"browse runs:    {browse_hint(tracker.uri)}")
    if signalled and controller.status == "stopped":
        raise typer.Exit(130)


def drive(controller, runs: Path, tracker) -> None:
    """Run a controller; Ctrl-C and SIGTERM stop it cleanly and say how to resume."""
    name = controller.config.name
    stop_on_signals()
    try:
        controller.run()
    except KeyboardInterrupt:
        err_console.print(f"[yellow]stopped[/]; continue with:  autorl resume {name} --runs-dir {runs}")
        raise typer.Exit(130) from None
    console.print(f"show the tree:  autorl show {name} --runs-dir {runs}")
    console.print(f"browse runs:    {browse_hint(tracker.uri)}")
    if controller.status != "finished":
        err_console.print(f"[bold red]{controller.status}:[/]", escape(controller.reason), highlight=False,
                          soft_wrap=True)
        if controller.resumable:
            err_console.print(f"continue after fixing the cause:  autorl resume {name} --runs-dir {runs}")
        raise typer.Exit(1)


def stop_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM stop the session however it was started: a process
    started as a background job (`nohup autorl research ... &`, cron, many schedulers)
    inherits SIGINT as ignored, and Python then installs no handler of its own."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_interrupt)


def browse_hint(uri: str) -> str:
    """How to look at the runs: a tracking server is its own UI; a file store needs one."""
    return f"{uri} (the MLflow server's UI)" if uri.startswith(("http://", "https://")) \
        else f"mlflow ui --backend-store-uri {uri}"


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def unexpected_errors_as_one_line(what: str, folder: Path):
    """An error no check foresaw, while a stored session is read back: one line saying what
    failed and where its traceback was written, instead of the traceback."""
    try:
        yield
    except (*USER_ERRORS, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log = folder / "error.log" if folder.is_dir() else Path(tempfile.mkstemp(prefix="autorl-error-")[1])
        log.write_text(traceback.format_exc())
        line = (str(exc).strip().splitlines() or [""])[0]
        raise SessionError(f"{what}: {type(exc).__name__}: {line}; the record may be damaged "
                           f"(traceback in {log}); report it with that file") from exc


@app.command()
@cli_errors
def resume(
    name: str = typer.Argument(..., help="Session to continue (see `autorl ls`)."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
    llm_key_file: Optional[Path] = typer.Option(None, "--llm-key-file",
                                                help="File holding the API key [default: $OPENAI_API_KEY]."),
    approve: Optional[str] = typer.Option(None, "--approve", help="none | edits | all: change the approval mode stored "
                                                                  "with the session [default: the stored one]."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-j", min=1, max=64,
                                           help="Stages at once from now on [default: the stored number]."),
    wait: bool = typer.Option(False, "--wait", help="With --approve: run headless and wait for decisions from "
                                                    "`autorl tui NAME` (attached from another terminal)."),
):
    """Continue a stopped or killed session from what MLflow holds: nothing finished is redone."""
    from autorl.resume import resume_session
    from autorl.storage.records import stored_config
    from search.llm import read_api_key

    runs, tracker = open_tracker(runs_dir, tracking_uri, session=name)
    run = tracker.find_session(name)
    stored = stored_config(run)
    mode = approve or (stored.approve if stored else "none")
    check_approve(mode, stored=approve is None, wait=wait)
    needs_key = stored is not None and stored.strategy in ("llm", "hybrid")
    observer, gate = interface(mode, wait)
    with unexpected_errors_as_one_line(f"cannot resume session {name!r}", runs / "sessions" / name):
        controller = resume_session(name, tracker, observer=observer, gate=gate, approve=mode, parallel=parallel,
                                    api_key=read_api_key(llm_key_file) if needs_key else None, runs_dir=runs)
    if controller is None:
        console.print(f"session {name} has already finished; nothing to resume")
        return
    console.print(f"resuming {name}: {len(controller.tree.nodes)} nodes, {controller.budget.describe()}")
    if gate and not wait:
        drive_tui(controller, runs, tracker)
        return
    drive(controller, runs, tracker)


@app.command()
@cli_errors
def tui(
    name: str = typer.Argument(..., help="Session to attach to (see `autorl ls`); it may run in another process."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
):
    """Attach the TUI to a session: watch it live, and approve, reject or edit its pending proposals."""
    import getpass

    from autorl.errors import SessionError
    from autorl.loop.channel import Channel
    from autorl.storage.records import stored_config
    from autorl.views.tui import attach_app

    runs, tracker = open_tracker(runs_dir, tracking_uri, session=name)
    run = tracker.find_session(name)
    stored = stored_config(run) if run is not None else None
    if stored is None:
        raise SessionError(f"no session {name!r} in {runs}; list them with: autorl ls --runs-dir {runs}")
    session_dir = runs / "sessions" / name
    if not Channel(session_dir).exists:
        raise SessionError(f"session {name!r} has no live channel in {session_dir} (it does not run from this runs "
                           f"directory, or an older autorl ran it); see it with: autorl show {name}")
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise SessionError("autorl tui needs an interactive terminal")
    attach_app(session_dir, getpass.getuser()).run()


@app.command()
@cli_errors
def init(
    directory: Path = typer.Argument(..., help="Folder to create."),
    template: str = typer.Option(DEFAULT_TEMPLATE, "--template", "-t", help="Built-in template to copy."),
    base_model: Optional[str] = typer.Option(
        None, "--base-model", help="The template's base model: a local folder, or a Hugging Face id[@revision] "
                                   "(downloaded now, with your network; trials never have one)."),
    from_data: Optional[Path] = typer.Option(
        None, "--from-data", help="Make the template from your own JSONL, CSV or Parquet file of prompts and answers "
                                  "(with --base-model) instead of copying a built-in one."),
    prompt_field: Optional[str] = typer.Option(None, "--prompt-field", help="--from-data: the prompt's column."),
    answer_field: Optional[str] = typer.Option(None, "--answer-field", help="--from-data: the answer's column."),
    system: str = typer.Option("", "--system", help="--from-data: a system prompt before every prompt."),
    reward: str = typer.Option(
        "exact", "--reward", help="--from-data: exact | last-number | contains | regex:PATTERN | "
                                  "python:FILE:FUNCTION (a function (completion, answer) -> number in [0, 1])."),
    format_tag: Optional[str] = typer.Option(
        None, "--format-tag", help="--from-data: judge the answer inside <TAG>...</TAG>, with a small format reward."),
    val_size: Optional[int] = typer.Option(None, "--val-size", help="--from-data: validation items (default 200)."),
    test_size: Optional[int] = typer.Option(None, "--test-size", help="--from-data: test items (default 500)."),
):
    """Copy a template into a folder you can edit (or make one from your data file), then run it with --template DIR."""
    from autorl.models import install_base_model
    from autorl.stages import template as templates

    data_options = {"--prompt-field": prompt_field, "--answer-field": answer_field, "--system": system or None,
                    "--reward": None if reward == "exact" else reward, "--format-tag": format_tag,
                    "--val-size": val_size, "--test-size": test_size}
    stray = [name for name, value in data_options.items() if value is not None]
    if from_data is None and stray:
        raise ConfigError(f"{', '.join(stray)} describe{'s' * (len(stray) == 1)} a data file: add --from-data FILE")
    if from_data is not None:
        from autorl.own_task.build import FromData, create_from_data

        if not base_model:
            raise ConfigError("--from-data needs --base-model (a local folder or a Hugging Face id)")
        made = create_from_data(directory, FromData(from_data, base_model, prompt_field, answer_field, system, reward,
                                                    format_tag, val_size, test_size))
        console.print(made.summary(directory))
        console.print(f"edit {directory}/program.md, then: autorl research TOPIC --template {directory}")
        return

    loaded = templates.load(template, require_model=base_model is None)
    templates.copy_to(loaded, directory)
    if base_model:
        try:
            origin = install_base_model(directory, base_model)
            templates.load(str(directory))  # the whole contract, with the model in place
        except USER_ERRORS:
            shutil.rmtree(directory, ignore_errors=True)  # nothing half-made is left behind
            raise
        console.print(f"base model {origin} installed in {directory}/env")
    console.print(f"copied template [cyan]{loaded.name}[/] to {directory}; edit it, then: "
                  f"autorl research TOPIC --template {directory}")


@app.command("ls")
@cli_errors
def list_sessions(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
):
    """List sessions in the tracking store."""
    from rich.table import Table

    from autorl.storage.report import list_sessions as rows
    from autorl.views.live import fmt

    _, tracker = open_tracker(runs_dir, tracking_uri)
    sessions = rows(tracker)
    if not tracker.exists() and not as_json:
        console.print(f"no sessions: no tracking store at {tracker.uri} yet (`autorl research` creates it)",
                      highlight=False)
        return
    if as_json:
        print(json.dumps(sessions, indent=2))
        return
    table = Table(header_style="bold")
    for column in ("name", "status", "strategy", "stages", "base", "best val", "best test", "resumable", "topic"):
        table.add_column(column)
    for s in sessions:
        resumable = f"yes ({s['resume_note']})" if s["resumable"] else f"no ({s['resume_note']})"
        table.add_row(s["name"], s["status"], s["strategy"], str(s["stages_spent"]), fmt(s["base_score"]),
                      fmt(s["best_val_score"]), fmt(s["best_test_score"]), resumable, s["topic"])
    console.print(table)


@app.command()
@cli_errors
def show(
    name: str = typer.Argument(..., help="Session name (see `autorl ls`)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
):
    """Show one session's tree, read back from MLflow."""
    from rich.tree import Tree as RichTree

    from autorl.storage.report import show_session
    from autorl.views.live import fmt
    from search.tree import schedule_text

    _, tracker = open_tracker(runs_dir, tracking_uri, session=name)
    data = show_session(tracker, name)
    if as_json:
        print(json.dumps(data, indent=2))
        return
    root = RichTree(f"[bold]{data['name']}[/] ({data['status']}) base {fmt(data['base_score'])}")
    branches = {None: root}
    best_id = data["best"]["id"] if data["best"] else None
    for node in data["nodes"]:
        star = " ★" if node["id"] == best_id else ""
        score = (node["reason"][:80] if node["val_score"] is None
                 else f"val {node['val_score']:.3f} ± {node['val_stderr']:.3f}")
        label = (f"{node['id']}{star} {escape('[' + node['status'] + ']')} {escape(score)}  "
                 f"[dim]{schedule_text(node['hyperparameters'])}[/]")
        branches[node["id"]] = branches.get(node["parent"], root).add(label)
    console.print(root)
    if data["best"]:
        best = data["best"]
        from autorl.storage.report import path_share

        share = path_share(best["path_steps"], data.get("train_steps_spent"))
        console.print(f"best {best['id']} ({' → '.join(best['path'])}): val {fmt(best['val_score'])}, "
                      f"test {fmt(best['test_score'])}" + (f"; {share}" if share else ""))
    if data.get("beats_base") is False:
        from autorl.storage.report import NO_GAIN

        console.print(f"[yellow]{NO_GAIN}[/] (base val {fmt(data['base_score'])})")
    if data.get("memory"):
        console.print(f"memory: {data['memory']}", highlight=False)
    if data.get("seed_noise"):
        console.print(f"seed noise: {data['seed_noise']}", highlight=False)
    if (dashboard := dashboard_command(tracker, name)) is not None:
        console.print(f"its Optuna study:  {dashboard}", highlight=False)


def dashboard_command(tracker, name: str) -> str | None:
    """The optuna-dashboard command that opens a session's study (None without one)."""
    import shlex

    from autorl.session import study_folder
    from autorl.storage.records import stored_config
    from search.study import storage_url

    config = stored_config(tracker.find_session(name))
    if config is None or config.strategy in ("grid", "random", "greedy", "pbt", "defaults"):
        return None
    return (f"optuna-dashboard {shlex.quote(storage_url(study_folder(config), config.study_storage))}  "
            "(pip install optuna-dashboard)")


@app.command()
@cli_errors
def report(
    name: str = typer.Argument(..., help="Session name (see `autorl ls`)."),
    open_it: bool = typer.Option(False, "--open", help="Open the HTML report in a browser."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
):
    """Write a session's report (Markdown and HTML with figures) and log it to its MLflow run."""
    from autorl.views.session_report import report_session

    runs, tracker = open_tracker(runs_dir, tracking_uri, session=name)
    paths = report_session(tracker, name, runs / "sessions" / name)
    console.print(f"report: {paths['html']}\n        {paths['markdown']}", highlight=False)
    if open_it:
        import webbrowser

        webbrowser.open(paths["html"].resolve().as_uri())


@app.command()
@cli_errors
def doctor(
    sandbox: str = typer.Option("auto", "--sandbox", help="auto | bwrap | none: the tier to check."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", envvar="OPENAI_BASE_URL",
                                               help="LLM endpoint to probe."),
    runs_dir: Optional[Path] = RunsDir,
    tracking_uri: Optional[str] = TrackingUri,
):
    """Check this machine: sandbox tier and what it guarantees, GPU, LLM endpoint, tracking store."""
    from autorl.doctor import checks

    for title, ok, detail in checks(sandbox, llm_base_url, runs_dir, tracking_uri):
        mark = {True: "[green]ok[/]", False: "[red]no[/]", None: "[yellow]--[/]"}[ok]
        console.print(f"{mark}  [bold]{title}[/]: {detail}", highlight=False)


server_app = typer.Typer(help="A shared store: PostgreSQL and an MLflow tracking server on this machine.",
                         no_args_is_help=True)
app.add_typer(server_app, name="server")
ServerDir = typer.Option(None, "--dir", help="Folder of the pair's data and logs [default: RUNS_DIR/server].")


def server_folder(folder: Optional[Path], runs_dir: Optional[Path]) -> Path:
    from autorl.config import default_runs_dir

    return (folder or (runs_dir or default_runs_dir()) / "server").expanduser().resolve()


@server_app.command("up")
@cli_errors
def server_up(
    folder: Optional[Path] = ServerDir,
    runs_dir: Optional[Path] = RunsDir,
    port: int = typer.Option(5000, "--port", help="Port of the MLflow server (loopback)."),
    pg_port: int = typer.Option(5433, "--pg-port", help="Port of PostgreSQL (loopback)."),
    ray: bool = typer.Option(False, "--ray",
                             help="Also start a Ray head on this machine (loopback) for --executor ray."),
    ray_cpus: Optional[int] = typer.Option(None, "--ray-cpus", help="CPUs the Ray head offers [default: all]."),
):
    """Start PostgreSQL and an MLflow server on it (or say the pair is already up), and a Ray head with --ray."""
    from autorl import server

    info = server.up(server_folder(folder, runs_dir), pg_port=pg_port, mlflow_port=port)
    console.print(f"tracking server {info.tracking_uri} on PostgreSQL {info.database_uri} (data in {info.folder})",
                  highlight=False)
    use = f"autorl research TOPIC --tracking-uri {info.tracking_uri} --study-storage {info.database_uri}"
    if ray:
        from autorl.stages.ray_stages import start_local_head

        console.print(f"Ray head {start_local_head(cpus=ray_cpus)} (stop it with `autorl server down --ray`)",
                      highlight=False)
        use += " --executor ray --parallel N"
    console.print(f"use it:  {use}", highlight=False)


@server_app.command("down")
@cli_errors
def server_down(folder: Optional[Path] = ServerDir, runs_dir: Optional[Path] = RunsDir,
                ray: bool = typer.Option(False, "--ray", help="Also stop the Ray head on this machine.")):
    """Stop the pair (its data stays; `up` starts it again), and the local Ray head with --ray."""
    from autorl import server

    info = server.down(server_folder(folder, runs_dir))
    console.print("stopped" if info else "no server pair was started there", highlight=False)
    if ray:
        from autorl.stages.ray_stages import stop_local_head

        stop_local_head()
        console.print("Ray head stopped", highlight=False)


@server_app.command("status")
@cli_errors
def server_status(folder: Optional[Path] = ServerDir, runs_dir: Optional[Path] = RunsDir):
    """Whether the pair answers, and its URIs."""
    from autorl import server

    info = server.read_info(server_folder(folder, runs_dir))
    if info is None:
        console.print("no server pair started there")
        raise typer.Exit(1)
    state = "up" if server.healthy(info.tracking_uri) else "not answering"
    console.print(f"{state}: --tracking-uri {info.tracking_uri} --study-storage {info.database_uri}", highlight=False)
    if state != "up":
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover
    sys.exit(app())
