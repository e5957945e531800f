"""One vocabulary across commands: every option of every command (read from the typer app) has one
name per meaning and one meaning per name, the glossary in code is docs/options.md's, old names still
work with a note, and stores written with the old spec keys read and resume in the new ones."""

import inspect
import json
import re
import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest
import typer
from test_cli_contract import commands
from typer.testing import CliRunner

from trainperf.cli import app
from trainperf.cli.vocabulary import GLOSSARY, RENAMED, markdown_glossary
from trainperf.core.legacy import RENAMED_KEYS, RENAMED_VALUES, upgrade_spec
from trainperf.core.record import Record
from trainperf.core.store import SCHEMA_VERSION, Store
from trainperf.workloads.attention import AttentionSpec
from trainperf.workloads.comm import CommSpec
from trainperf.workloads.ddp import DDPSpec
from trainperf.workloads.llama_sdpa import LlamaSpec
from trainperf.workloads.step import StepSpec

runner = CliRunner()
COMMANDS = {" ".join(path): fn for path, fn in commands(app)}


def option_helps(fn) -> dict[str, str]:
    """flag -> help text of every option of one command."""
    found = {}
    for par in inspect.signature(fn).parameters.values():
        if isinstance(par.default, typer.models.OptionInfo):
            flag = next(d for d in par.default.param_decls if d.startswith("--"))
            found[flag] = par.default.help
    return found


def test_every_option_is_in_the_glossary_and_means_what_it_says_there():
    """A flag outside the glossary, or one whose help does not start with the glossary's meaning,
    is a name with a second meaning (or a meaning under a second name)."""
    for command, fn in COMMANDS.items():
        for flag, help_text in option_helps(fn).items():
            assert flag in GLOSSARY, f"{command} {flag}: not in the glossary (cli/vocabulary.py)"
            assert help_text.startswith(GLOSSARY[flag]), f"{command} {flag}: {help_text!r}"


def test_no_meaning_has_two_names():
    meanings = list(GLOSSARY.values())
    assert len(set(meanings)) == len(meanings)
    old_names = {old for renamed in RENAMED.values() for old in renamed}
    assert not old_names & set(GLOSSARY) - {"--model"}, "an old name is also a current name"


def test_every_glossary_flag_is_used_and_every_old_name_points_at_an_option_of_its_command():
    used = {flag for fn in COMMANDS.values() for flag in option_helps(fn)}
    assert used | {"--version", "--verbose"} == set(GLOSSARY)  # the two of trainperf itself
    for command, renamed in RENAMED.items():
        current = set(option_helps(COMMANDS[command]))
        for old, new in renamed.items():
            assert new in current and old not in current, (command, old, new)


@pytest.mark.parametrize("spec_class, internal", [
    (StepSpec, set()), (AttentionSpec, set()), (LlamaSpec, set()), (CommSpec, set()),
    (DDPSpec, {"lr", "vocab", "round"}),  # round: which of the --rounds a case is
])
def test_spec_fields_are_named_like_their_flags(spec_class, internal):
    fields = set(spec_class.__dataclass_fields__) - internal
    assert {f for f in fields if "--" + f.replace("_", "-") not in GLOSSARY} == set()


def test_the_documented_glossary_is_the_one_in_code():
    assert markdown_glossary() in (Path(__file__).parents[1] / "docs" / "options.md").read_text()


def test_the_help_names_the_shared_options():
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0
    for flag in ("--model", "--seq", "--dtype", "--iters", "--warmup", "--out", "--db"):
        assert flag in res.output


def test_old_names_work_with_a_one_line_note_naming_the_new_flag(db, tmp_path):
    res = runner.invoke(app, ["step", "--size", "tiny", "--context=16", "--precision", "float32",
                              "--steps", "1", "--warmup", "0", "--batch", "2", "--device", "cpu", "--quiet",
                              "--db", str(db), "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for old, new in (("--size", "--model"), ("--context", "--seq"), ("--precision", "--dtype"),
                     ("--steps", "--iters")):
        assert f"note: {old} is the old name of {new}" in res.output
    (rec,) = Store(db).records()
    assert [rec.spec[k] for k in ("model", "seq", "dtype", "iters")] == ["tiny", 16, "fp32", 1]
    assert (tmp_path / "step.csv").exists()


def test_an_old_name_means_its_own_command_s_new_name():
    """`--size` was a model preset in step and a message size in comm: each maps to its own."""
    assert RENAMED["step"]["--size"] == "--model" and RENAMED["comm"]["--size"] == "--bytes"
    res = runner.invoke(app, ["comm", "--size", "0", "--dist-backend", "gloo"])
    assert res.exit_code == 2 and "--bytes: cannot read '0'" in res.output


def test_dtype_values_are_the_same_everywhere(db):
    for args in (["attention", "--dtype", "fp64"], ["comm", "--dtype", "fp64"], ["llama", "--dtype", "fp64"],
                 ["step", "--dtype", "fp64"], ["ddp", "--dtype", "fp64"]):
        res = runner.invoke(app, [*args, "--db", str(db)])
        assert res.exit_code == 2 and "valid choices: fp32, bf16, fp16" in res.output, (args, res.output)


SPECS = {
    "step": StepSpec.from_preset("tiny", seq=16, batch=2, dtype="fp32", compile=False, mode="train",
                                 device="cpu", d_model=None, d_ff=None, layers=None, heads=None),
    "attention": AttentionSpec("naive", 1, 2, 32, 16, "fp32", "forward-backward", True, "cpu"),
    "llama": LlamaSpec(sdpa_backend="MATH", batch=1, seq=32, model="tiny", device="cpu"),
    "comm": CommSpec(op="all_reduce", bytes=65536, world_size=2, dist_backend="gloo", dtype="bf16"),
    "ddp": DDPSpec(variant="flat", model="tiny", world_size=2, bucket_mb=None, shard_optimizer=False, seq=16,
                   batch=2, dtype="fp32", dist_backend="gloo"),
}


def old_form(workload: str, spec: dict) -> dict:
    """`spec` as trainperf stored it before the one vocabulary."""
    back = {new: old for old, new in RENAMED_KEYS.get(workload, {}).items()}
    old = {back.get(k, k): v for k, v in spec.items()}
    for key, values in RENAMED_VALUES.get(workload, {}).items():
        inverse = {new: o for o, new in values.items()}
        old_key = back.get(key, key)
        old[old_key] = inverse.get(old[old_key], old[old_key])
    if workload == "comm":  # no timing or in-place variants yet: loop timing was its own op
        old["op"] = "all_reduce_loop" if old.pop("timing") == "loop" else old["op"]
        del old["in_place"]
    if workload == "llama":  # one model field, and no library or float8 yet
        old.update(preset=old.pop("model"), config=None, model=None)
        del old["library"], old["float8"]
    return old


@pytest.mark.parametrize("workload", SPECS)
def test_old_spec_keys_upgrade_to_the_new_spec(workload):
    new = asdict(SPECS[workload])
    old = old_form(workload, new)
    assert old != new and upgrade_spec(workload, old) == new
    assert upgrade_spec(workload, new) == new


def test_llama_records_with_a_config_or_hub_id_keep_it_as_the_model():
    old = old_form("llama", asdict(SPECS["llama"]))
    assert upgrade_spec("llama", {**old, "config": "my/config.json"})["model"] == "my/config.json"
    assert upgrade_spec("llama", {**old, "model": "org/name"})["model"] == "org/name"


def test_a_store_of_old_records_reads_and_resumes_in_the_new_names(db, tmp_path):
    spec = StepSpec.from_preset("tiny", seq=16, batch=2, dtype="fp32", compile=False, mode="train",
                                device="cpu", d_model=None, d_ff=None, layers=None, heads=None, warmup=0,
                                iters=1)
    env = {"device": "cpu"}
    old = Record("step", old_form("step", asdict(spec)), "ok", {"step_ms_median": 123.0}, env=env)
    Store(db).append(old)  # what an older trainperf wrote: old keys, the case key of the old spec
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version=0")
    con.commit()
    con.close()
    assert json.loads(sqlite3.connect(db).execute("SELECT spec FROM records").fetchone()[0])["context"] == 16
    (rec,) = Store(db, create=False).records()  # read-only: upgraded on the fly
    assert rec.spec == asdict(spec)
    res = runner.invoke(app, ["step", "--model", "tiny", "--seq", "16", "--batch", "2", "--dtype", "fp32",
                              "--iters", "1", "--warmup", "0", "--device", "cpu", "--quiet", "--db", str(db),
                              "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    records = Store(db).records()
    assert len(records) == 1 and records[0].metrics["step_ms_median"] == 123.0  # resumed, not measured again
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_the_glossary_names_every_recipe_and_float8_choice():
    from trainperf.models.peers import FLOAT8
    from trainperf.workloads.llama_sdpa import RECIPES

    def named(flag: str) -> set[str]:
        return set(re.findall(r"[a-z0-9][a-z0-9-]*[a-z0-9]", GLOSSARY[flag]))
    assert set(RECIPES) <= named("--recipe")
    assert set(FLOAT8) <= named("--float8")
