"""Usage errors the command-line parser finds, said the way the library's errors are:
one line on stderr, ``error: --OPTION: what is wrong (got VALUE)``, exit code 1 — instead
of click's usage box. ``OneLineErrors`` is the ``autorl`` command group that does it for
every command.
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.markup import escape
from typer._click import exceptions as click_errors  # typer 0.29 parses with its own copy of click
from typer.core import TyperGroup

err_console = Console(stderr=True)


class UsageLine(click_errors.ClickException):
    """A usage error as autorl prints it: one line on stderr, exit code 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        err_console.print("[bold red]error:[/]", escape(self.message), highlight=False, soft_wrap=True)


def param_label(param) -> str:
    """How an error names a parameter: its long flag (``--stages``, not ``-n``), or an
    argument's name in capitals (``TOPIC``), as the README and ``--help`` write them."""
    if param is None:
        return ""
    if param.param_type_name == "argument":
        return (param.name or "").upper()
    longs = [flag for flag in param.opts if flag.startswith("--")]
    return (longs or list(param.opts) or [param.name or ""])[0]


def sentence(text: str) -> str:
    """Click's message as a clause: one line, lower-case first letter, no final full stop,
    a suggestion in brackets (``no such command 'serve' (did you mean 'server'?)``)."""
    text, _, suggestion = " ".join(text.split()).partition(". Did you mean ")
    text = text.rstrip(".") + (f" (did you mean {suggestion.rstrip('?')}?)" if suggestion else "")
    return text[:1].lower() + text[1:]


def usage_error_line(exc: click_errors.UsageError) -> str:
    """What a usage error the parser found says, in the form the config's errors take:
    ``--OPTION: what is wrong (got VALUE)``."""
    param = getattr(exc, "param", None)
    label = param_label(param)
    command = exc.ctx.command_path if exc.ctx is not None else "autorl"
    if isinstance(exc, click_errors.MissingParameter):
        return f"{label}: missing; see `{command} --help`"
    if isinstance(exc, click_errors.BadParameter) and label:
        cause = exc.__cause__  # typer converts values with pydantic: its error holds the value
        if hasattr(cause, "errors") and cause.errors():
            error = cause.errors(include_url=False)[0]
            what = str(error["msg"]).removeprefix("Input ")
            if error["type"].endswith("_parsing"):  # "should be a valid integer, unable to parse string as …"
                what = what.split(", ")[0]
            return f"{label}: {what} (got {error['input']!r})"
        return f"{label}: {sentence(exc.message)}"
    if isinstance(exc, click_errors.NoSuchOption):
        maybe = f" (did you mean {' or '.join(sorted(exc.possibilities))}?)" if exc.possibilities else ""
        return f"{exc.option_name}: no such option of `{command}`{maybe}"
    if isinstance(exc, click_errors.BadOptionUsage):
        return f"{exc.option_name}: {sentence(exc.message.removeprefix(f'Option {exc.option_name!r} '))}"
    return f"{sentence(exc.message)}; see `{command} --help`"


@contextlib.contextmanager
def one_line_usage_errors():
    try:
        yield
    except click_errors.NoArgsIsHelpError:
        raise  # a bare `autorl` (or `autorl server`) prints its help
    except click_errors.UsageError as exc:
        raise UsageLine(usage_error_line(exc)) from None


class OneLineErrors(TyperGroup):
    """The ``autorl`` command group. Whatever the parser refuses in any command — a value
    that is not an integer, a number or one of the choices, an unknown option or command,
    a missing argument — comes out as the one line the library's errors make, with exit
    code 1, instead of click's usage box. Subcommands are parsed inside ``invoke``."""

    def make_context(self, *args, **kwargs):
        with one_line_usage_errors():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx):
        with one_line_usage_errors():
            return super().invoke(ctx)
