"""Every option of every command, fed a value that cannot be right for its type (a negative number,
NaN, an empty string, a path under a file), is refused with one line naming the option, exit
code 2, before any work and without writing anything. The commands and their options are read from
the typer app, so a new option is covered the day it is added."""

import inspect
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainperf.cli import app

runner = CliRunner()
BAD_VALUES = {int: ["-1"], float: ["-1", "nan"], str: [""], Path: ["a.txt/x"]}
POSITIONAL = {"compare": ["set.csv", "set.csv"], "profile-compare": ["bd.json", "bd.json"],
              "nsys-decode": ["trace.sqlite"], "run": ["step-sizes"]}


def commands(group: typer.Typer, path: tuple[str, ...] = ()):
    for c in group.registered_commands:
        yield (*path, c.name or c.callback.__name__.replace("_", "-")), c.callback
    for g in group.registered_groups:
        yield from commands(g.typer_instance, (*path, g.name))


def options(fn) -> list[tuple[str, type]]:
    hints = typing.get_type_hints(fn)
    found = []
    for name, par in inspect.signature(fn).parameters.items():
        if isinstance(par.default, typer.models.OptionInfo):
            decls = [d for d in (par.default.param_decls or ()) if d.startswith("--")]
            found.append((decls[0] if decls else "--" + name.replace("_", "-"), hints[name]))
    return found


CASES = [(path, opt, value, any(o == "--device" for o, _ in options(fn)))
         for path, fn in commands(app) for opt, typ in options(fn) for value in BAD_VALUES.get(typ, [])]


def test_the_walk_finds_the_commands_and_their_options():
    assert len({c[0] for c in CASES}) >= 12 and len(CASES) >= 100


@pytest.mark.parametrize("path, option, value, on_cpu", CASES,
                         ids=[f"{' '.join(p)} {o}={v!r}" for p, o, v, _ in CASES])
def test_a_value_wrong_for_its_type_is_refused(tmp_path, monkeypatch, breakdown_text, path, option, value,
                                               on_cpu):
    monkeypatch.chdir(tmp_path)
    Path("a.txt").write_text("a file")
    Path("set.csv").write_text("backend,batch_size,seq_len,mean_s,status\nMATH,1,64,0.1,ok\n")
    Path("bd.json").write_text(breakdown_text)
    args = [*path, *POSITIONAL.get(path[-1], []), option, value]
    if on_cpu and option != "--device":
        args += ["--device", "cpu"]
    before = set(tmp_path.iterdir())
    res = runner.invoke(app, args)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2, res.output
    assert len(lines) == 1, res.output
    assert option in lines[0] or (option == "--db" and "results store" in lines[0]), lines[0]
    assert set(tmp_path.iterdir()) == before
