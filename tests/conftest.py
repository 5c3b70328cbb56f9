"""Shared fixtures: paths to bundled and third-party traces, a pinned console width."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_traces"
#: Third-party traces live outside the repo; tests that need them skip when absent.
REAL = Path(os.environ.get("MTIA_TRACE_REAL_TRACES", REPO.parent / "shared" / "traces" / "real"))


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


requires_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real traces not found at {REAL}")


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
