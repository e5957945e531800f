"""Suite commands: suite list, suite run NAME, report."""

from __future__ import annotations

from pathlib import Path

import typer

from trainperf.cli.common import (
    QuietOpt,
    RerunOpt,
    app,
    check_out_dir,
    check_out_file,
    cli_errors,
    console,
)
from trainperf.cli.vocabulary import RenamedFlags, option
from trainperf.core.errors import SpecError

suite_app = typer.Typer(help="Named benchmark suites: list them, run one into a dated results folder.")
app.add_typer(suite_app, name="suite")
ResultsOpt = option("--results", Path("benchmarks/results"))


@suite_app.command("list", cls=RenamedFlags)
def suite_list() -> None:
    """The suites, what each measures, and the commands each runs on a GPU."""
    from trainperf.suites.catalog import SUITES

    for suite in SUITES.values():
        console.print(f"[bold]{suite.name}[/bold]: {suite.about}", highlight=False)
        for part in suite.parts:
            need = f"  (needs {part.min_gpus}+ GPUs)" if part.min_gpus > 1 else ""
            console.print(f"    trainperf {' '.join(part.argv(True, '<GPUs>'))}{need}", highlight=False,
                          soft_wrap=True)


def invoke(argv: list[str]) -> int:
    """Run one trainperf command line in this process; its exit code (a usage error in one line)."""
    from trainperf.cli.usage import run_cli

    return run_cli(app, argv)


@suite_app.command("run", cls=RenamedFlags)
@cli_errors
def suite_run(
    name: str = typer.Argument(..., help="A suite name (trainperf suite list)."),
    results: Path = ResultsOpt, rerun: bool = RerunOpt, quiet: bool = QuietOpt,
    db: Path | None = option("--db", None, "Here the store every part writes; default NAME.db in the "
                                           "results folder, so a committed folder resumes from its own "
                                           "store on any machine."),
    part: str = option("--part", None, "Only these parts of the suite (trainperf suite list names them); "
                                       "comma-separated. Default: every part."),
) -> None:
    """Run one suite on this machine (its tiny form on the CPU) into <results>/NAME/<gpu>-<date>/."""
    from trainperf.suites.page import suite_report
    from trainperf.suites.runner import chosen_parts, get_suite, run_suite

    suite = get_suite(name)
    parts = chosen_parts(suite, part)
    check_out_dir(results, "--results")
    if db is not None:
        check_out_file(db, "--db")
    folder = run_suite(suite, results, db, invoke, rerun=rerun, quiet=quiet, parts=parts,
                       say=lambda text: console.print(f"[dim]{text}[/dim]", highlight=False, soft_wrap=True))
    console.print(suite_report(folder), highlight=False, markup=False)
    console.print(f"[dim]wrote {folder}[/dim]", highlight=False)


@app.command(cls=RenamedFlags)
@cli_errors
def report(
    results: Path = ResultsOpt,
    page: Path = option("--file", None, "Here the results page (default: README.md beside the results "
                                        "folder, benchmarks/README.md)."),
) -> None:
    """Write the results page, and the report.md and figures of each folder it shows (the newest run
    of each part of each suite), again from the results folders."""
    from trainperf.suites.page import latest_folders, results_page, write_report

    if page is not None:
        check_out_file(page, "--file")
    if not results.is_dir():
        raise SpecError(f"--results {str(results)!r}: no such folder (trainperf suite run writes it)")
    page = results.parent / "README.md" if page is None else page
    for folder in latest_folders(results):
        write_report(folder)
    page.write_text(results_page(results, page))
    console.print(f"wrote {page}", highlight=False)
