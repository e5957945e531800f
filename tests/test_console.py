"""Only trainperf speaks on the console: a library's warning about the case becomes the record's
note, its talk about itself is silenced (by message and module), and --verbose shows it all."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from trainperf.core.graph_breaks import outside_graph
from trainperf.core.library_noise import VERBOSE_ENV, quiet_libraries
from trainperf.core.runner import measure_case
from trainperf.suites.console_log import console_to

SRC = str(Path(__file__).parents[1] / "src")
LIBRARY_LINE = re.compile(r"Warning|^\[W|\.py:\d+|^\s+\S.*\($")  # a warning, torch's [W ...], a source line


def test_a_warning_about_the_case_is_its_note_once_and_not_printed(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    def measure(spec):
        for _ in range(3):
            warnings.warn("Memory efficient kernel not used because: head_dim 300 > 256", UserWarning,
                          stacklevel=1)
        return {"value": 1}

    with warnings.catch_warnings(record=True) as shown:
        first = measure_case("t", {"i": 0}, measure, {})
        second = measure_case("t", {"i": 1}, measure, {})  # a second case sees its own warning again
    for rec in (first, second):
        assert rec.metrics["notes"] == "Memory efficient kernel not used because: head_dim 300 > 256"
    assert shown == []


def test_a_compiled_case_s_graph_breaks_are_its_note_and_a_whole_graph_has_none():
    def whole(x):
        return (x * 2).sin()

    def broken(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y.sin()

    def measure(fn):
        torch._dynamo.reset()
        torch.compile(fn, backend="eager")(torch.ones(4))
        return {}

    clean = measure_case("t", {"fn": "whole"}, lambda s: measure(whole), {})
    rec = measure_case("t", {"fn": "broken"}, lambda s: measure(broken), {})
    assert clean.status == rec.status == "ok" and "notes" not in clean.metrics
    assert rec.metrics["notes"].startswith('1 graph break(s) in compiled code ("')
    assert "graph_break" in rec.metrics["notes"] and "TORCH_LOGS=graph_breaks" in rec.metrics["notes"]
    again = measure_case("t", {"fn": "whole"}, lambda s: measure(whole), {})  # a case counts its own
    assert "notes" not in again.metrics


def test_a_break_where_trainperf_keeps_a_function_out_of_the_graph_says_which_and_why():
    @outside_graph("the test keeps it out")
    def kept_out(x):
        return x * 2

    def calls_it(x):
        return kept_out(x.sin()).cos()

    def measure(fn):
        torch._dynamo.reset()
        torch.compile(fn, backend="eager")(torch.ones(4))
        return {}

    rec = measure_case("t", {"fn": "kept"}, lambda s: measure(calls_it), {})
    assert re.fullmatch(r"1 graph break\(s\) where `\S+<locals>\.kept_out` is kept out of the compiled graph "
                        r"on purpose: the test keeps it out", rec.metrics["notes"]), rec.metrics["notes"]


def _warn_from(module: str, message: str) -> None:
    exec(compile(f"import warnings\nwarnings.warn({message!r}, UserWarning)", module, "exec"),
         {"__name__": module})


def test_a_library_s_talk_about_itself_is_silenced_by_message_and_module(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        _warn_from("cutlass.base_dsl.dsl", "generate_mlir_function_types is deprecated")
        _warn_from("liger_kernel.ops.backends", "Backend impl 'x' for op 'rope' could not be imported")
        _warn_from("liger_kernel.ops.backends", "a warning of another kind")  # not one we name
        _warn_from("torch._inductor.compile_fx", "TensorFloat32 tensor cores for float32 matrix "
                   "multiplication available but not enabled. Consider setting ...")
        _warn_from("trainperf_user", "generate_mlir_function_types is deprecated")  # another module
    assert [(w.filename, str(w.message)) for w in shown] == [
        ("liger_kernel.ops.backends", "a warning of another kind"),
        ("trainperf_user", "generate_mlir_function_types is deprecated")]


def test_verbose_shows_the_silenced_warnings_and_still_notes_the_case(monkeypatch):
    monkeypatch.setenv(VERBOSE_ENV, "1")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        _warn_from("cutlass.base_dsl.dsl", "generate_mlir_function_types is deprecated")
        rec = measure_case("t", {}, lambda s: warnings.warn("Flash attention has been runtime disabled.",
                                                              stacklevel=1) or {}, {})
    assert [str(w.message) for w in shown] == ["generate_mlir_function_types is deprecated",
                                               "Flash attention has been runtime disabled."]
    assert rec.metrics["notes"] == "Flash attention has been runtime disabled."


def test_a_compiled_recipe_gloo_ranks_and_a_compiled_sharded_profile_print_no_library_line(tmp_path):
    # on the CPU wherever it runs: two gloo ranks need no second GPU
    env = {**os.environ, "PYTHONPATH": SRC, "CUDA_VISIBLE_DEVICES": ""}
    env.pop(VERBOSE_ENV, None)
    runs = [["llama", "--recipe", "compile", "--batch-seq", "1x16", "--iters", "1", "--warmup", "1"],
            ["ddp", "--world-size", "2", "--variant", "naive", "--iters", "2", "--warmup", "1"],
            ["profile", "shard", "--compile", "on", "--checkpoint", "all-but-1+attn"]]  # ranks of launch
    procs = []  # all three at once: each spends most of its time compiling on one core
    for args in runs:
        stored = [] if args[0] == "profile" else ["--db", str(tmp_path / f"{args[0]}.db")]
        procs.append(subprocess.Popen([sys.executable, "-m", "trainperf", *args, "--out",
                                       str(tmp_path / args[0]), *stored], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=tmp_path))
    try:
        for args, proc in zip(runs, procs, strict=True):
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-2000:]
            noise = [line for line in err.splitlines() if LIBRARY_LINE.search(line)]
            assert noise == [], (args, noise)
    finally:
        for proc in procs:
            proc.kill()


def test_a_library_s_log_line_about_itself_is_dropped_and_its_others_kept(monkeypatch, caplog):
    import logging

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    quiet_libraries()
    registry = logging.getLogger("liger_kernel.backends.registry")
    with caplog.at_level(logging.WARNING):
        registry.warning("Backend impl '%s' for op '%s' could not be imported: %s: %s",
                         "liger_kernel.ops.backends._ascend.rope", "rope", "ImportError",
                         "cannot import name 'tanh'")
        registry.warning("a line of another kind")
        logging.getLogger("torch.utils.cpp_extension").warning(
            "No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local/cuda")
    assert "could not be imported" not in caplog.text and "a line of another kind" in caplog.text
    assert "No CUDA runtime" not in caplog.text


def test_console_txt_keeps_python_s_lines_the_descriptors_and_child_processes(tmp_path, capfd):
    """C++ libraries, compilers and ranks write to the descriptors, not to sys.stderr: the file
    keeps them too, and the terminal still gets everything."""
    path = tmp_path / "console.txt"
    with console_to(path):
        print("from python")
        os.write(2, b"[W from a library\n")
        child = "import sys; print('from a child', file=sys.stderr)"
        subprocess.run([sys.executable, "-c", child], check=True)
        print("\x1b[1mbold\x1b[0m")
    kept = path.read_text().splitlines()
    assert sorted(kept) == sorted(["from python", "[W from a library", "from a child", "bold"])
    seen = capfd.readouterr()
    assert "from python" in seen.out and "[W from a library" in seen.err and "from a child" in seen.err


def test_a_fork_server_started_during_the_run_leaves_console_txt_at_once_with_its_ranks_lines(tmp_path):
    """A fork server started while the run's descriptors are pipes holds them as its own: the run
    ends without waiting for their end of file, and a rank forked from it is kept in the file."""
    from multiprocessing import forkserver, get_context

    if forkserver._forkserver._forkserver_pid is not None:  # started by an earlier test
        forkserver._forkserver._stop()
    path = tmp_path / "console.txt"
    with console_to(path):
        rank = get_context("forkserver").Process(target=os.write, args=(1, b"from a rank\n"))
        rank.start()
        rank.join()
        start = time.monotonic()
    assert time.monotonic() - start < 2.5  # each pump waited 5 s for an end of file before
    assert path.read_text().splitlines() == ["from a rank"]


def test_console_txt_keeps_a_printed_line_whole_when_a_library_writes_while_it_is_printed(tmp_path):
    """print writes its text and its newline apart; a library's line written in between goes
    before the printed line in the file, not into it, and a last line without a newline is kept."""
    path = tmp_path / "console.txt"
    with console_to(path):
        sys.stdout.write("from python")
        os.write(2, b"[W from a library\n")
        for _ in range(500):  # until the descriptor's pump has written the library's line
            if "[W" in path.read_text():
                break
            time.sleep(0.01)
        sys.stdout.write("\n")
        sys.stdout.write("last, without a newline")
    assert path.read_text().splitlines() == ["[W from a library", "from python", "last, without a newline"]


RANK_THAT_DIES = """
import multiprocessing as mp, os, signal, sys
def rank():
    held = mp.get_context("spawn").Semaphore()  # noqa: F841 - as a compile worker pool holds them
    os.kill(os.getpid(), signal.SIGKILL)
if __name__ == "__main__":
    if sys.argv[1] == "quiet":
        from trainperf.distributed.supervisor import quiet_resource_tracker
        quiet_resource_tracker()
    else:
        from multiprocessing import resource_tracker
        resource_tracker.ensure_running()
    p = mp.get_context("spawn").Process(target=rank)
    p.start()
    p.join()
"""


def test_the_semaphores_of_a_rank_that_died_are_removed_without_a_warning(tmp_path):
    """multiprocessing's resource tracker outlives the supervisor briefly and warns about each
    leaked semaphore after trainperf's last line; the supervisor starts it without that warning."""
    script = tmp_path / "ranks.py"
    script.write_text(RANK_THAT_DIES)
    env = {**os.environ, "PYTHONPATH": SRC}
    env.pop(VERBOSE_ENV, None)
    said = {how: subprocess.run([sys.executable, str(script), how], env=env, capture_output=True, text=True,
                                timeout=120).stderr for how in ("plain", "quiet")}
    assert "leaked semaphore" in said["plain"]  # what the supervisor keeps off the console
    assert said["quiet"] == ""


def test_a_log_line_about_the_case_is_its_note_once_without_its_traceback(monkeypatch, caplog):
    """torch.compile logs, with a traceback, each time it cannot read which inputs a Triton kernel
    writes (Liger's under compile, torch 2.11); the record says it once, the console not at all."""
    import logging

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    dynamo = logging.getLogger("torch._dynamo")

    def measure(spec):
        for at in range(3):  # as Triton's compile errors: the place and source first, the error last
            try:
                raise AttributeError(f"at {at}:14:\n    X_row = X_row.to(tl.float32)\n\n"
                                     "'float' object has no attribute 'to'")
            except AttributeError:
                dynamo.warning("Encountered an exception in identify_mutated_tensors, assuming every input "
                               "is mutated", exc_info=True)
        dynamo.warning("a line of another kind")
        return {"value": 1}

    with caplog.at_level(logging.WARNING):
        rec = measure_case("t", {}, measure, {})
    assert rec.metrics["notes"] == ("Encountered an exception in identify_mutated_tensors, assuming every "
                                    "input is mutated (AttributeError: 'float' object has no attribute 'to')")
    assert "identify_mutated_tensors" not in caplog.text and "a line of another kind" in caplog.text
    with caplog.at_level(logging.WARNING):  # outside a case the line takes its usual course
        dynamo.warning("Encountered an exception in identify_mutated_tensors, assuming every input is "
                       "mutated")
    assert "identify_mutated_tensors" in caplog.text


def test_dynamo_s_warning_about_a_library_s_lru_cache_is_silenced(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    message = ("Dynamo detected a call to a `functools.lru_cache`-wrapped function at 'swiglu.py:34'. "
               "Dynamo ignores the cache wrapper and directly traces the wrapped function.")
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet_libraries()
        _warn_from("torch._dynamo.variables.functions", message)
        _warn_from("trainperf_user", message)  # the same words from another module are shown
    assert [w.filename for w in shown] == ["trainperf_user"]
