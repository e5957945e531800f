"""Does a Ctrl-C while Inductor compiles print anything but trainperf's own line?

Starts `trainperf step --compile on` (the GPT LM preset given, on the GPU where there is one) in a
process group of its own, as a terminal's foreground job, waits until a compiler it started runs
(ptxas, g++, or Inductor's compile workers), sends SIGINT to the whole group as a Ctrl-C does, and
prints every line the command printed after it, with its exit code.

    python3 benchmarks/probes/interrupt_compile.py [MODEL] [OUT.json]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

COMPILERS = ("ptxas", "cc1plus", "g++", "nvcc")


def group_commands(pgid: int) -> list[str]:
    found = subprocess.run(["ps", "-o", "comm=", "-g", str(pgid)], capture_output=True, text=True)
    return found.stdout.split()


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "medium"
    folder = tempfile.mkdtemp()
    argv = [sys.executable, "-m", "trainperf", "step", "--model", model, "--seq", "512", "--compile", "on",
            "--quiet", "--db", f"{folder}/r.db", "--out", folder]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    start, seen = time.monotonic(), []
    while proc.poll() is None and time.monotonic() - start < 300:
        running = group_commands(proc.pid)
        seen = [c for c in running if c in COMPILERS]
        if seen:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    answer = {"argv": argv[2:], "compilers_running": seen, "after_s": round(time.monotonic() - start, 1),
              "rc": proc.returncode, "lines": lines}
    print(json.dumps(answer, indent=1))
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(answer, f, indent=1)


if __name__ == "__main__":
    main()
