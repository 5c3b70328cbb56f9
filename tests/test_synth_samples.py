"""The bundled synthetic samples are reproducible from their documented commands."""

from __future__ import annotations

import re
import shlex

import pytest

from mtia_trace.cli import main
from tests.conftest import SAMPLES

COMMANDS = [line for line in (SAMPLES / "README.md").read_text().splitlines()
            if line.startswith("mtia-trace synth ")]


def test_readme_documents_both_samples():
    assert len(COMMANDS) == 2


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: re.search(r"-o (\S+)", c).group(1))
def test_sample_regenerates_byte_identical(tmp_path, cmd):
    argv = shlex.split(cmd)[1:]
    i = argv.index("-o")
    target = SAMPLES.parent / argv[i + 1]
    argv[i + 1] = str(tmp_path / "out")
    assert main(argv) == 0
    want = sorted(target.glob("*.json.gz"))
    got = sorted((tmp_path / "out").glob("*.json.gz"))
    assert [p.name for p in got] == [p.name for p in want] and want
    for g, w in zip(got, want, strict=True):
        assert g.read_bytes() == w.read_bytes(), g.name
        assert w.stat().st_size < 300_000
