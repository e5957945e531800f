"""What every trainperf command shares: the app, consoles, options, error handling."""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from trainperf.cli.vocabulary import DTYPE_ALIASES, help_epilog, option
from trainperf.core import env as envmod
from trainperf.core import report
from trainperf.core.errors import SpecError, Unsupported
from trainperf.core.library_noise import VERBOSE_ENV, quiet_libraries
from trainperf.core.record import Record, case_key_for
from trainperf.core.runner import run_sweep
from trainperf.core.shared_sweep import helpers
from trainperf.core.sigint import end_worker_processes
from trainperf.core.spec import MAX_INT, parse_list, positive_int
from trainperf.core.store import DEFAULT_DB, Store, path_problem, to_frame
from trainperf.version import __version__

quiet_libraries()
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure and explain how fast a Transformer LM trains.",
                  epilog=help_epilog())


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"trainperf {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = option("--version", False, callback=_print_version, is_eager=True),
          verbose: bool = option("--verbose", False)) -> None:
    """Measure and explain how fast a Transformer LM trains."""
    if verbose:
        os.environ[VERBOSE_ENV] = "1"  # ranks and workers started from here inherit it
        warnings.resetwarnings()


# A terminal sizes the tables (or COLUMNS); logs and CI, with no terminal, get 160 columns.
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
err_console = Console(stderr=True)

DbOpt = option("--db", Path(DEFAULT_DB))
DeviceOpt = option("--device", "auto")
RerunOpt = option("--rerun", False)
QuietOpt = option("--quiet", False)
JsonOpt = option("--json", False)


def _set_wide(value: bool) -> bool:
    report.TABLES.wide = value
    return value


# Read where tables are drawn (report.TABLES), so commands declare it and pass nothing on.
WideOpt = option("--wide", False, callback=_set_wide, expose_value=False)
OutOpt = option("--out", Path("trainperf-out"))
# One implementation each of the swappable parts (`step` takes lists of them instead).
NormOpt = option("--norm", "torch")
SwigluOpt = option("--swiglu", "torch")
RopeOpt = option("--rope", "torch")
LossOpt = option("--loss", "torch")
KvHeadsOpt = option("--kv-heads", "native")
DTYPE_CHOICES = ("fp32", "bf16", "fp16")


def dtypes(text: str) -> list[str]:
    """The --dtype list in short names (fp32, bf16, fp16), long names (float32, ...) read too."""
    return parse_list(text, str, "--dtype", DTYPE_CHOICES, aliases=DTYPE_ALIASES)


LONG_VALUE = 80  # characters of one word a message shows whole


def shorten_values(message: str) -> str:
    """The message with any word longer than LONG_VALUE cut to its start and its length: a value
    of thousands of characters is named, not echoed back."""
    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        return f"{word[:LONG_VALUE // 2]}... ({len(word)} characters)"
    return re.sub(rf"[^\s'\",;]{{{LONG_VALUE + 1},}}", cut, message)


def fail(message: str) -> None:
    """One-line error, exit code 2, nothing written."""
    from rich.markup import escape

    err_console.print(f"[red]error:[/red] {escape(shorten_values(message))}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(2)


def check_int_range(options: dict[str, Any]) -> None:
    """SpecError for an integer option beyond what any count, size or index can be (each command
    checks its own lower bounds)."""
    for name, value in options.items():
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise SpecError(f"--{name.replace('_', '-')} {value} is out of range: "
                            f"an integer up to {MAX_INT:,}")


def cli_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Bad input → one line + exit 2 (a file the system refuses, too: a name too long, no
    permission; a single case that cannot run here); Ctrl-C → say what is kept + exit 130."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            check_int_range(kwargs)
            return fn(*args, **kwargs)
        except SpecError as exc:
            fail(str(exc))
        except Unsupported as exc:  # a single case (a profile) that cannot run here: say why, once
            fail(f"unsupported here: {exc}")
        except OSError as exc:
            if exc.filename is None:  # not about a file the user named
                raise
            fail(f"{exc.filename}: {exc.strerror or exc}")
        except KeyboardInterrupt as exc:  # its text, where there is one, says where it stopped
            where = f"{exc}; " if str(exc) else ""
            err_console.print(f"[yellow]interrupted[/yellow]: {where}every finished case is in the store; "
                              "run the same command again to resume.", soft_wrap=True, highlight=False)
            end_worker_processes()
            raise typer.Exit(130) from None
    return wrapper


def with_defaults(defaults: dict[str, Any], **given: Any) -> dict[str, Any]:
    """The options as given, the device's defaults for those left out. Only a missing option takes
    its default: an empty or zero value stays, for validation to refuse."""
    return {**defaults, **{k: v for k, v in given.items() if v is not None}}


def check_out_dir(path: Path, option: str = "--out") -> None:
    """SpecError unless `path` is, or can be made, a writable folder (checked before any work;
    the folder itself is made when the first file is written)."""
    _check_writable(path, option, want_dir=True)


def check_outputs(out: Path, db: Path) -> None:
    """SpecError unless the results can go where the user named: --out a writable folder, --db a
    store that can be opened or made (checked before any work, and before any other package loads)."""
    check_out_dir(out)
    problem = path_problem(db, create=True)
    if problem:
        raise SpecError(f"--db {str(db)!r}: {problem}")


def check_out_file(path: Path, option: str) -> None:
    """SpecError unless a file can be written at `path`: not a folder, in a writable folder."""
    _check_writable(path, option, want_dir=False)


def _check_writable(path: Path, option: str, want_dir: bool) -> None:
    if str(path) in ("", "."):
        if want_dir:
            return
        raise SpecError(f"{option} needs a file name")
    try:
        if path.exists():
            if path.is_dir() != want_dir:
                raise SpecError(f"{option} {str(path)!r} is not a {'folder' if want_dir else 'file'}")
            if not os.access(path, os.W_OK):
                raise SpecError(f"{option} {str(path)!r} is not writable")
            return
        parent = next(p for p in path.parents if p.exists())
        if not want_dir and parent != path.parent:
            raise SpecError(f"{option} {str(path)!r}: folder {str(path.parent)!r} does not exist")
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise SpecError(f"{option} {str(path)!r}: {str(parent)!r} is not a writable folder")
    except OSError as exc:  # a name too long for the file system, ...
        raise SpecError(f"{option} {str(path)!r}: {exc.strerror or exc}") from None


def step_parts() -> dict[str, tuple[str, ...]]:
    """The GPT LM's swappable parts (each an option of `step` and `profile step`) and the
    implementations each takes."""
    from trainperf.attention.registry import NAMES
    from trainperf.models.lm import IMPLS
    from trainperf.models.norms import NORMS
    from trainperf.workloads.step import LOSSES

    return {"attention": NAMES, "norm": tuple(NORMS), "rope": tuple(IMPLS), "swiglu": tuple(IMPLS),
            "loss": tuple(LOSSES)}


def device_or_fail(name: str):
    try:
        return envmod.resolve_device(name)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a command's sweep, after its finished cases were written to its table:
    `records` are those cases, for the command's own files beside the table."""

    def __init__(self, message: str, records: list[Record]) -> None:
        super().__init__(message)
        self.records = records


@contextmanager
def table_kept_on_interrupt(workload: str, keys: Sequence[str], store: Store, out: Path,
                            named: dict[str, Callable[[Record], Any]] | None = None) -> Iterator[None]:
    """On Ctrl-C, write the cases of `keys` that finished (this run's and the store's) as the
    command's `<out>/<workload>.csv` before the interrupt goes on, as `Interrupted`: a long sweep
    cut short leaves its table, not only its store."""
    try:
        yield
    except KeyboardInterrupt as exc:
        records = [r for k in keys if (r := store.find_case(k)) is not None]
        if not records:
            raise
        path = write_records_csv(records, out, workload, named)
        where = f"{exc}; " if str(exc) else ""
        raise Interrupted(f"{where}the {len(records)} finished case(s) are in {path}", records) from None


def run_and_show(workload: str, specs: Sequence[Any], measure: Callable[[Any], dict[str, Any]],
                 columns: Sequence[report.Column], *, db: Path, device, rerun: bool, quiet: bool,
                 as_json: bool, title: str, out: Path,
                 named: dict[str, Callable[[Record], Any]] | None = None,
                 helpers_at: Sequence[str] = ()) -> list[Record]:
    """The shared tail of every workload command: sweep into the store, show the table, write the
    cases as `<out>/<workload>.csv` (with the `named` columns first, each a function of a record).
    With `helpers_at` (core/shared_sweep.helper_places) helper processes there share the cases out."""
    store = Store(db)
    env = envmod.capture(device)
    keys = [case_key_for(workload, s, env) for s in specs]
    with table_kept_on_interrupt(workload, keys, store, out, named), \
            helpers(workload, specs, measure, db, helpers_at, rerun,
                    say=lambda text: err_console.print(text, markup=False, highlight=False)):
        records = run_sweep(workload, specs, measure, store, env, rerun=rerun, quiet=quiet or as_json,
                            label=lambda s: s.label(), console=err_console)
    show_records(records, columns, title, as_json)
    path = write_records_csv(records, out, workload, named)
    if not as_json:
        gpu = env.get("gpu_name") or f"CPU ({env['cpu_count']} cores)"
        cases = f"{len(records)} case" + ("" if len(records) == 1 else "s")
        console.print(f"[dim]{cases} on {gpu}, torch {env['torch']}; stored in {db}; "
                      f"table in {path}[/dim]", highlight=False)
    return records


def write_records_csv(records: Sequence[Record], out: Path, workload: str,
                      named: dict[str, Callable[[Record], Any]] | None = None) -> Path:
    """The records of this command as `<out>/<workload>.csv` (one row per case), the `named`
    columns (each a function of a record) after the status."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{workload}.csv"
    frame = to_frame(records)
    for i, (name, of) in enumerate((named or {}).items()):
        frame.insert(2 + i, name, [of(r) for r in records])
    path.write_text(report.export(frame, "csv"))
    return path


def plots_available(quiet: bool) -> bool:
    """True when matplotlib is installed; otherwise a note naming the extra (plots are skipped,
    the numbers are not)."""
    from trainperf.core import plots

    if plots.available():
        return True
    if not quiet:
        err_console.print(f"note: {plots.NO_PLOTS}", markup=False)
    return False


def show_records(records: Sequence[Record], columns: Sequence[report.Column], title: str,
                 as_json: bool) -> None:
    """The records as a table on the terminal, or as JSON on stdout."""
    if as_json:
        sys.stdout.write(report.export(to_frame(records), "json"))
    else:
        console.print(report.rich_table(records, columns, title=title, width=console.width))


def batch_seq_pair(text: str) -> tuple[int, int]:
    b, n = text.lower().split("x")
    return positive_int(b), positive_int(n)


def frame_table(df, title: str = "", case: Sequence[str] = (), notes: Sequence[str] = ()):
    """A rich table of a DataFrame, every cell formatted like the workload tables; the `case`
    columns name a row (said once above the table where every row shares them, never dropped),
    the `notes` columns' text (empty for none) are numbered footnotes under it."""
    def role(c: str) -> str:
        return "case" if c in case else "notes" if c in notes else "frame"

    cols = [report.Column(c, (lambda r, c=c: report.fmt(r[c])), role(c)) for c in df.columns]
    return report.rich_table([row for _, row in df.iterrows()], cols, title=title, width=console.width)
