"""Shared fixtures: paths to bundled, vendored and third-party data, a pinned console width,
and the end-of-run lines saying how many tests ran on real data and which gated figures held."""

from __future__ import annotations

import os
import sys
import types
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
#: Small real data vendored with the repository (tests/data/README.md: licence, provenance).
DATA = REPO / "tests" / "data"


def only_run(folder: Path) -> Path:
    """The one run `mtia-trace replay -o FOLDER` wrote for one target."""
    runs = [p for p in Path(folder).iterdir() if (p / "run.json").is_file()]
    assert len(runs) == 1, runs
    return runs[0]


def _first_dir(*candidates: Path) -> Path:
    return next((p for p in candidates if p.is_dir()), candidates[-1])


_FULL = Path(os.environ.get("MTIA_TRACE_REAL_TRACES", REPO.parent / "shared" / "traces" / "real"))
#: Real traces: the full corpus when present, else the vendored subset.
REAL = _first_dir(_FULL, DATA / "real")
#: Published nccl-tests tables: the full set when present, else the vendored copy.
NCCL_TABLES = _first_dir(Path(os.environ.get("MTIA_TRACE_NCCL_TABLES", REPO.parent / "shared" / "nccl")),
                         DATA / "nccl")

# `from tests.x import ...` without the repository root on sys.path (CI tests the installed wheel
# with PYTHONSAFEPATH=1, so that `import mtia_trace` cannot find the source tree).
if "tests" not in sys.modules:
    _pkg = types.ModuleType("tests")
    _pkg.__path__ = [str(REPO / "tests")]
    sys.modules["tests"] = _pkg


#: MTIA_TRACE_TEST_INSTALLED=1 (.ci/run): the packages under test must be the installed ones
INSTALLED = os.environ.get("MTIA_TRACE_TEST_INSTALLED") == "1"
PACKAGES = ("mtia_trace", "replay", "analyzers")


def _from_source_tree() -> list[str]:
    """Loaded modules of the three packages that come from this source tree."""
    return sorted(name for name, m in list(sys.modules.items())
                  if name.split(".")[0] in PACKAGES and getattr(m, "__file__", None)
                  and Path(m.__file__).resolve().is_relative_to(REPO / name.split(".")[0]))


def real_file(rel: str) -> Path:
    """``REAL / rel``; skips the test when that trace is not there (one not vendored)."""
    p = REAL / rel
    if not p.exists():
        pytest.skip(f"optional data absent: {rel} is not in {REAL} (the full corpus has it)")
    return p


@pytest.fixture(autouse=True)
def _fixed_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("NO_COLOR", "1")


def real_traces() -> list[Path]:
    """Every .json/.json.gz under the real-trace folder (empty when the folder is absent)."""
    if not REAL.is_dir():
        return []
    return sorted(p for p in REAL.rglob("*") if p.name.endswith((".json", ".json.gz"))
                  and p.name != "manifest.json")


requires_real = pytest.mark.skipif(not REAL.is_dir(),
                                   reason=f"optional data absent: real traces not found at {REAL}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs real data (`requires_real`) counts as one: it gets the `real` marker."""
    for item in items:
        if any(m == requires_real.mark for m in item.iter_markers("skipif")):
            item.add_marker(pytest.mark.real)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the expected outputs under tests/golden/ instead of comparing")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when run with --update-golden: tests rewrite their golden files."""
    return bool(request.config.getoption("--update-golden"))


def invoke_cli(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the `mtia-trace` entry point in process: (exit code, stdout, stderr)."""
    from mtia_trace.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """``cli("replay", path, "--hw", "mtia300")`` → (exit code, stdout, stderr)."""
    return lambda *args: invoke_cli(list(args), capsys)


@pytest.fixture(scope="session")
def published_runs() -> list[dict]:
    """Every published training run of benchmarks/validate_throughput.py, rebuilt with synth and
    replayed (`validate_throughput.run`): once per session, shared by the tests that need it."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import validate_throughput

    return validate_throughput.run(list(validate_throughput.POINTS))


# ---- end of run: real data and gated figures ---------------------------------------------------

_GATE_LINES: list[str] = []


@pytest.fixture
def gate_report():
    """``gate_report(line)`` prints ``line`` in the end-of-run summary (figures against bounds)."""
    return _GATE_LINES.append


def _is_real(report: pytest.TestReport) -> bool:
    return "real" in report.keywords


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    stats = terminalreporter.stats
    ran = [r for r in stats.get("passed", []) + stats.get("failed", []) if _is_real(r)]
    skipped = [r for r in stats.get("skipped", []) if r.when in ("setup", "call")]
    missing = Counter(str(r.longrepr[2]).removeprefix("Skipped: ") for r in skipped
                      if isinstance(r.longrepr, tuple) and "optional data absent" in r.longrepr[2])
    other = Counter(str(r.longrepr[2]).removeprefix("Skipped: ") for r in skipped
                    if isinstance(r.longrepr, tuple) and "optional data absent" not in r.longrepr[2])
    tr = terminalreporter
    tr.section("real data")
    tr.write_line(f"{len(ran)} tests ran on real data from {REAL}")
    tr.write_line(f"{sum(missing.values())} skipped for missing optional data")
    for reason, n in missing.most_common():
        tr.write_line(f"  {n:>3}  {reason}")
    if other:
        tr.write_line(f"{sum(other.values())} skipped for other reasons")
        for reason, n in other.most_common():
            tr.write_line(f"  {n:>3}  {reason}")
    if _GATE_LINES:
        tr.section("gated figures (benchmarks/gates.json)")
        for line in _GATE_LINES:
            tr.write_line(line)


def pytest_report_header(config: pytest.Config) -> str:
    import mtia_trace

    return f"mtia_trace from {Path(mtia_trace.__file__).parent}; real data from {REAL}"


def pytest_sessionstart(session: pytest.Session) -> None:
    if INSTALLED:
        import mtia_trace  # noqa: F401

        if _from_source_tree():
            raise pytest.UsageError(
                f"MTIA_TRACE_TEST_INSTALLED=1 but mtia_trace imports from {REPO}: run pytest "
                "with PYTHONSAFEPATH=1 and without the repository on PYTHONPATH")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With MTIA_TRACE_TEST_INSTALLED=1, a test that imported the source tree fails the run;
    with MTIA_TRACE_REQUIRE_REAL=1 (CI), so does a run in which no real-data test ran."""
    if INSTALLED and (mixed := _from_source_tree()):
        print(f"\nmodules imported from the source tree, not the installed package: "
              f"{', '.join(mixed[:5])}", file=sys.stderr)
        session.exitstatus = 1
    if os.environ.get("MTIA_TRACE_REQUIRE_REAL") != "1" or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    stats = reporter.stats if reporter else {}
    if not any(_is_real(r) for r in stats.get("passed", [])):
        if reporter:
            reporter.write_line("no test ran on real data (MTIA_TRACE_REQUIRE_REAL=1)", red=True)
        session.exitstatus = 1
