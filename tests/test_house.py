"""The house: the package is a pipeline (no module reaches back up to one that imports it, directly
or through others; imports inside functions count too: they are the same dependency, later),
results folders hold data only, and every probe is listed with its question."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src"
DATA = {".csv", ".json", ".txt", ".png", ".md", ".db", ".log", ".gz"}  # .gz: a trace, compressed


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """trainperf module -> the trainperf modules it imports."""
    files = {module_name(p): p for p in (SRC / "trainperf").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "trainperf.kernels.rope" in graph and graph["trainperf.cli.workloads"]  # the walk sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_results_folders_hold_data_only():
    code = [str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks" / "results").rglob("*")
            if p.is_file() and p.suffix not in DATA]
    assert code == []


def test_every_probe_is_listed_with_its_question_command_and_last_answer():
    listed = (ROOT / "benchmarks" / "probes" / "README.md").read_text()
    for probe in (ROOT / "benchmarks" / "probes").glob("*.py"):
        row = next((line for line in listed.splitlines() if line.startswith(f"| `{probe.name}` |")), None)
        assert row is not None, probe.name
        assert f"python3 benchmarks/probes/{probe.name}" in row and row.count(" | ") == 3, row
