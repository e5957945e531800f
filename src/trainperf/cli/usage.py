"""Running the command line so that every usage error is one line: the framework's own too.

Click and typer answer an unknown command or option, a missing argument or a value of the wrong
type with a usage line and a framed box; trainperf answers them as it answers its own checks:
`error: <what> (<allowed>); see 'trainperf CMD --help'`, exit code 2."""

from __future__ import annotations

import re
from collections.abc import Sequence

import typer

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as clickx
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import exceptions as clickx

from trainperf.cli.common import err_console, shorten_values

USAGE_EXIT = 2


def _allowed(exc: clickx.UsageError) -> str:
    """The choices a usage error leaves out: the commands, for a command that does not exist."""
    ctx = exc.ctx
    if isinstance(exc, clickx.NoSuchOption) or ctx is None:
        return ""
    if re.match(r"(No such|Missing) command", exc.format_message()) and hasattr(ctx.command, "list_commands"):
        return f" (commands: {', '.join(ctx.command.list_commands(ctx))})"
    return ""


def usage_line(exc: clickx.UsageError) -> str:
    """`error: <what> (<allowed>); see '<command> --help'` in one line."""
    what = " ".join(exc.format_message().split()).rstrip(".")
    where = exc.ctx.command_path if exc.ctx is not None else "trainperf"
    return shorten_values(f"error: {what}{_allowed(exc)}; see '{where} --help'")


def run_cli(app: typer.Typer, args: Sequence[str]) -> int:
    """Run the command line on `args`; returns the exit code."""
    try:
        result = app(args=list(args), prog_name="trainperf", standalone_mode=False)
    except clickx.NoArgsIsHelpError as exc:  # a group named alone: its help
        print(exc.ctx.get_help())
        return USAGE_EXIT
    except clickx.UsageError as exc:
        err_console.print(usage_line(exc), markup=False, highlight=False, soft_wrap=True)
        return USAGE_EXIT
    except clickx.ClickException as exc:
        err_console.print(shorten_values(f"error: {exc.format_message()}"), markup=False,
                          highlight=False, soft_wrap=True)
        return exc.exit_code
    except typer.Abort:
        return 130
    return result if isinstance(result, int) else 0
