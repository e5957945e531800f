"""The bad-input contract across the CLI: one line naming the option and what is allowed, exit
code 2, no results store and no output folder created. Each row is an input a user can type."""

import pytest
from typer.testing import CliRunner

from trainperf.cli import app

runner = CliRunner()
CPU = ["--device", "cpu"]

CASES = [  # (arguments, words the one line must hold)
    (["step", *CPU, "--model", "tiny,,tiny"], "--model: empty item"),
    (["step", *CPU, "--seq", "64,,128"], "--seq: empty item"),
    (["step", *CPU, "--batch", ""], "--batch needs at least one value"),
    (["step", *CPU, "--tf32", "maybe"], "--tf32: cannot read 'maybe'"),
    (["step", *CPU, "--peak-tflops", "-1"], "--peak-tflops must be a positive number"),
    (["step", *CPU, "--peak-tflops", "nan"], "--peak-tflops must be a positive number"),
    (["step", *CPU, "--peak-tflops", "inf"], "--peak-tflops must be a positive number"),
    (["step", *CPU, "--peak-tflops", "0"], "--peak-tflops must be a positive number"),
    (["step", *CPU, "--warmup", "-1"], "--warmup must be >= 0"),
    (["attention", *CPU, "--attention", ""], "--attention needs at least one value"),
    (["attention", *CPU, "--dtype", ""], "--dtype needs at least one value"),
    (["attention", *CPU, "--batch", "0"], "--batch must be positive"),
    (["attention", *CPU, "--warmup", "-3"], "--warmup must be >= 0"),
    (["attention", *CPU, "--out", "{file}"], "is not a folder"),
    (["llama", *CPU, "--batch-seq", ""], "--batch-seq needs at least one value"),
    (["llama", *CPU, "--sdpa-backend", "MATH,MATH"], "--sdpa-backend: 'MATH' is given twice"),
    (["llama", *CPU, "--model", ""], "--model needs a preset"),
    (["llama", *CPU, "--iters", "0"], "--iters must be positive"),
    (["llama", *CPU, "--warmup", "-1"], "--warmup must be >= 0"),
    (["llama", *CPU, "--baseline", "CUDNN_ATTENTION"], "is not a measured backend"),
    (["llama", *CPU, "--out", "{file}"], "is not a folder"),
    (["comm", "--op", "all_reduce,,broadcast"], "--op: empty item"),
    (["comm", "--bytes", ""], "--bytes needs at least one value"),
    (["comm", "--iters", "0"], "--iters must be positive"),
    (["comm", "--warmup", "-1"], "--warmup must be >= 0"),
    (["comm", "--world-size", "100000"], "more than this host runs with gloo"),
    (["comm", "--dist-backend", "nccl"], "--dist-backend nccl needs CUDA GPUs"),
    (["ddp", "--seq", "0"], "--seq must be positive"),
    (["ddp", "--batch", "0"], "--batch must be positive"),
    (["ddp", "--world-size", "100000"], "more than this host runs with gloo"),
    (["ddp", "--dist-backend", "nccl"], "--dist-backend nccl needs CUDA GPUs"),
    (["profile", "step", *CPU, "--seq", "0"], "--seq must be positive"),
    (["profile", "step", *CPU, "--compile", "maybe"], "--compile: cannot read 'maybe'"),
    (["profile", "step", *CPU, "--model", "bogus"], "--model: unknown value 'bogus'"),
    (["profile", "step", *CPU, "--iters", "0"], "--iters must be positive"),
    (["profile", "step", *CPU, "--out", "{file}"], "is not a folder"),
    (["profile", "attention", *CPU, "--seq", "0"], "--seq must be positive"),
    (["profile", "attention", *CPU, "--causal", "maybe"], "--causal: cannot read 'maybe'"),
    (["profile", "attention", *CPU, "--attention", "bogus"], "--attention: unknown value 'bogus'"),
    (["profile", "llama", *CPU, "--batch-seq", "1x"], "--batch-seq: cannot read '1x'"),
    (["profile", "llama", *CPU, "--batch-seq", "0x16"],
     "--batch-seq: 0 is not an integer from 1 to 2,147,483,647"),
    (["profile", "llama", *CPU, "--batch-seq", "1x16,2x16"], "--batch-seq takes one value"),
    (["memory", "step", *CPU, "--seq", "0"], "--seq must be positive"),
    (["memory", "step", *CPU, "--model", "bogus"], "--model: unknown value 'bogus'"),
    (["results", "--workload", "bogus"], "unknown --workload 'bogus'"),
    (["results", "--status", "bogus"], "unknown --status 'bogus'"),
    (["results", "--last", "0"], "--last must be positive"),
    (["export", "--workload", "bogus"], "unknown --workload 'bogus'"),
    (["export", "-o", "{dir}"], "is not a file"),
    (["export", "-o", "{dir}/missing/x.csv"], "does not exist"),
    (["compare", "{csv}", "{csv}", "--axis", "bogus"], "--axis 'bogus'; valid choices"),
    (["compare", "{csv}", "{empty}"], "is not a CSV file"),
    (["profile-compare", "{json}", "{dir}"], "a folder, not a file"),
    (["profile-compare", "{json}", "{list_json}"], "is not a breakdown"),
    (["profile-compare", "{json}", "{json}", "--file", "{dir}"], "is not a file"),
    (["nsys-decode", "x" * 300], "File name too long"),
    # sizes that cannot fit in this machine's memory: refused with the estimate and the limit
    (["step", *CPU, "--seq", "10000000"], "GiB of memory on the CPU"),
    (["step", *CPU, "--batch", "999999999"], "GiB of memory on the CPU"),
    (["step", *CPU, "--batch", "99999999999999999999"], "is not an integer from 1 to 2,147,483,647"),
    (["profile", "step", *CPU, "--seq", "10000000"], "GiB of memory on the CPU"),
    (["memory", "step", *CPU, "--seq", "10000000"], "GiB of memory on the CPU"),
    (["attention", *CPU, "--seq", "10000000"], "GiB of memory on the CPU"),
    (["profile", "attention", *CPU, "--seq", "10000000"], "GiB of memory on the CPU"),
    (["llama", *CPU, "--batch-seq", "1x10000000"], "GiB of memory on the CPU"),
    (["llama", *CPU, "--layers", "1000"], "--layers must be between 1 and the model's 2"),
    (["shard", "--layers", "9"], "--layers must be from 1 to 2 (tiny's decoder layers), got 9"),
    (["predict", "--gpus", "0"], "--gpus: 0 is not an integer from 1"),
    (["predict", "--model", "bogus"], "--model: unknown value 'bogus'"),
    (["predict", "--inter-node", "fast"], "--inter-node 'fast': give a rate per GPU"),
    (["predict", "--shard", "bogus"], "--shard: unknown value 'bogus'"),
    (["predict", "--gpus-per-node", "0"], "--gpus-per-node must be positive"),
    (["predict", "--results", "{file}"], "not a folder of results"),
    (["predict", "--results", "{dir}"], "no one-GPU shard record of cs336-8b"),
    (["predict-check", "--results", "{dir}"], "no multi-GPU shard or ddp rows to check"),
]


@pytest.mark.parametrize("args, message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, monkeypatch, breakdown_text, args,
                                                         message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("not a folder")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "set.csv").write_text("backend,batch_size,seq_len,mean_s,status\nMATH,1,64,0.1,ok\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bd.json").write_text(breakdown_text)
    names = {"{file}": "a.txt", "{dir}": str(tmp_path), "{csv}": "set.csv", "{empty}": "empty.csv",
             "{json}": "bd.json", "{list_json}": "list.json"}
    args = [next((a.replace(k, v) for k, v in names.items() if k in a), a) for a in args]
    before = set(tmp_path.iterdir())
    res = runner.invoke(app, [*args, "--quiet"] if args[0] in ("step", "attention", "llama", "comm", "ddp")
                        else args)
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert set(tmp_path.iterdir()) == before  # no store, no output folder, no file


def test_a_malformed_fault_variable_is_one_line_about_it_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPERF_FAULT", "hang:1")
    db = tmp_path / "r.db"
    res = CliRunner().invoke(app, ["ddp", "--db", str(db), "--out", str(tmp_path / "o"), "--quiet"])
    assert res.exit_code == 2
    assert "TRAINPERF_FAULT='hang:1': expected KIND:RANK:CASE:CALL" in " ".join(res.output.split())
    assert not db.exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, says", [
    (["ddp", "--rounds", "99999999999999999999"], "--rounds 99999999999999999999 is out of range: an integer "
                                                  "up to 2,147,483,647"),
    (["step", "--seq", "99999999999"], "--seq: 99999999999 is not an integer from 1 to 2,147,483,647"),
    (["shard", "--unit-layers", "3"],
     "--unit-layers must be a number of decoder layers from 1 to 2 (tiny has 2)"),
    (["shard", "--checkpoint", "all-but-\uff11"], "--checkpoint 'all-but-\uff11'; valid choices"),
    (["step", "--seq", "\uff11\uff16"], "--seq: cannot read '\uff11\uff16'"),
    (["suite", "run", "peers", "--part", "llama,,llama"],
     "--part of suite peers: empty item in 'llama,,llama'"),
    (["suite", "run", "peers", "--part", "llama,llama"], "--part of suite peers: 'llama' is given twice"),
    (["shard", "--model", "2.7B", "--seq", "4096"], "GiB of memory on the CPU"),
    (["ddp", "--seq", "10000000"], "GiB of memory on the CPU"),
])
def test_values_that_name_nothing_real_or_cannot_fit_are_refused_in_one_line(tmp_path, args, says):
    db, out = tmp_path / "r.db", tmp_path / "o"
    where = [] if args[0] == "suite" else ["--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--db", str(db), *where])
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split()), res.output
    assert len(res.output.strip().splitlines()) <= 3  # one line, as the terminal wraps it
    assert not db.exists() and not out.exists()


def test_a_refusal_on_a_spawned_rank_is_the_same_one_line_as_in_one_process(tmp_path):
    res = CliRunner().invoke(app, ["memory", "shard", "--model", "tiny", "--seq", "16", "--attention", "fa4",
                                   "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert " ".join(res.output.split()).startswith("error: unsupported here: fa4 needs FlashAttention 4")
