"""The import graph of the three packages, read from the source (no module is imported): no
cycles, layers that point one way, and every function-level import of the project's own modules
explained by a comment (why it cannot be at the top: startup cost).

Module-level and function-level imports both count (a function-level import hides a cycle, it
does not remove it); imports under ``if TYPE_CHECKING:`` do not (they never run).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mtia_trace", "replay", "analyzers")

#: Import cycles being removed; the cycle test fails on any other cycle.
KNOWN_CYCLES: set[frozenset[str]] = set()

#: The cost model's layer: the hardware package may import only these from the project.
HARDWARE_MAY_IMPORT = ("replay.hardware", "replay.costs", "replay.intervals", "replay.groups",
                       "mtia_trace.schema", "mtia_trace.errors")
#: Known breaks of the hardware layer rule, being removed: (importing, imported).
KNOWN_HARDWARE_BREAKS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    module: str      # the importing module
    target: str      # the project module it imports
    line: int
    in_function: bool
    explained: bool  # a comment on the line above or on the same line


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[Import]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]

    def explained(line: int) -> bool:
        comment = lines[line - 1].partition("#")[2].strip()
        same = bool(comment) and not comment.startswith(("type:", "noqa", "pragma"))
        above = line >= 2 and lines[line - 2].strip().startswith("#")
        return same or above

    def targets(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
            return
        base = node.module or ""
        if node.level:
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            yield sub if sub in MODULES else base

    def visit(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.orelse:
                    yield from visit(stmt, in_function)
                continue
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in dict.fromkeys(targets(child)):
                    if target.split(".")[0] in PACKAGES and target != module:
                        yield Import(module, target, child.lineno, in_function,
                                     explained(child.lineno))
            yield from visit(child, inner)

    yield from visit(ast.parse(source), False)


IMPORTS = [imp for module, path in sorted(MODULES.items()) for imp in _imports(module, path)]


def _cycles() -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        if imp.target in graph:
            graph[imp.module].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_walk_sees_function_level_imports() -> None:
    # The cycle below is the reason the walk reads function bodies: the driver imports the
    # shard module at the top, the shard imports replay_job inside a function.
    assert any(i.in_function for i in IMPORTS)
    assert {("mtia_trace.cli.hw_cmd", "replay.hardware")} <= {(i.module, i.target) for i in IMPORTS}


def test_no_import_cycles() -> None:
    cycles = _cycles()
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"


def test_no_known_cycles_remain() -> None:
    assert not _cycles()


def test_no_unexplained_function_level_imports() -> None:
    # A function-level import of the project's own modules needs a comment on the line above
    # or on the same line saying why it cannot be at the top (startup cost).
    bad = sorted({(i.module, i.target, i.line) for i in IMPORTS
                  if i.in_function and not i.explained})
    assert not bad, ("function-level imports of the project's modules without a comment "
                     f"saying why (move them to the top, or explain the startup cost): {bad}")


def test_the_walk_sees_unexplained_function_level_imports(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from replay.graph import build_graph\n\n\n"
                   "def g():\n    # the cost model pulls in numpy: `hw list` needs only specs\n"
                   "    from replay.costs import AsMeasured\n", encoding="utf-8")
    found = {(i.target, i.explained) for i in _imports("m", src) if i.in_function}
    assert found == {("replay.graph", False), ("replay.costs", True)}


def test_hardware_imports_nothing_from_the_pipeline() -> None:
    bad = sorted({(i.module, i.target) for i in IMPORTS if _under(i.module, "replay.hardware")
                  and not any(_under(i.target, ok) for ok in HARDWARE_MAY_IMPORT)})
    assert not set(bad) - KNOWN_HARDWARE_BREAKS, bad


@pytest.mark.parametrize(("lower", "upper"), [
    ("replay", "mtia_trace.cli"), ("replay", "analyzers"),
    ("analyzers", "mtia_trace.cli"),
    ("mtia_trace.ingest", "mtia_trace.cli"), ("mtia_trace.ingest", "replay"),
    ("mtia_trace.ingest", "analyzers"), ("mtia_trace.ingest", "mtia_trace.storage"),
])
def test_layers_point_one_way(lower: str, upper: str) -> None:
    bad = sorted({(i.module, i.target) for i in IMPORTS
                  if _under(i.module, lower) and _under(i.target, upper)})
    assert not bad, f"{lower} must not import {upper}: {bad}"


def test_ingest_imports_only_the_schema_keys_and_errors() -> None:
    allowed = ("mtia_trace.ingest", "mtia_trace.schema", "mtia_trace.keys", "mtia_trace.errors")
    bad = sorted({(i.module, i.target) for i in IMPORTS if _under(i.module, "mtia_trace.ingest")
                  and not any(_under(i.target, ok) for ok in allowed)})
    assert not bad, bad


def test_concepts_names_modules_that_exist() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = text.split("## 0. Where each stage lives", 1)[1].split("\n## 1.", 1)[0]
    paths = set(re.findall(r"`((?:mtia_trace|replay|analyzers)/[\w/]*(?:\.py)?)`", section))
    assert paths, "docs/concepts.md lost its stage table"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/concepts.md names modules that do not exist: {missing}"


def test_only_the_cli_imports_the_cli() -> None:
    entry = {"mtia_trace.__main__"}  # `python -m mtia_trace`, like the console script
    bad = sorted({(i.module, i.target) for i in IMPORTS if _under(i.target, "mtia_trace.cli")
                  and not _under(i.module, "mtia_trace.cli") and i.module not in entry})
    assert not bad, bad


def test_no_module_shadows_the_standard_library() -> None:
    import sys

    shadows = sorted(m for m in MODULES if m.rsplit(".", 1)[-1] in sys.stdlib_module_names)
    assert not shadows, f"rename these modules (they shadow the standard library): {shadows}"
