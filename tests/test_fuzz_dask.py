"""Dask failures in one line: a local cluster that does not start, a worker that keeps dying;
Dask's own loggers are silent meanwhile and restored after. Simulated (no cluster is started)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")

from replay.distributed import driver  # noqa: E402

TRACE = Path(__file__).resolve().parent.parent / "sample_traces" / "synth" / "dcnv2_train_2rank"


def _levels() -> dict[str, int]:
    return {n: logging.getLogger(n).level for n in ("distributed", "distributed.nanny",
                                                     "distributed.worker", "tornado")}


def test_a_cluster_that_does_not_start_is_one_line(cli, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    before = _levels()
    seen: dict[str, bool] = {}

    def failing_cluster(**kwargs: object) -> None:
        seen["logs"] = logging.getLogger("distributed.nanny").isEnabledFor(logging.ERROR)
        seen["workers_quiet"] = kwargs.get("silence_logs") == driver.QUIET
        raise RuntimeError("Nanny failed to start.\nmore of Dask's story")

    monkeypatch.setattr(distributed, "LocalCluster", failing_cluster)
    code, _, err = cli("replay", TRACE, "--hw", "mtia300", "--workers", "2", "--out",
                       tmp_path / "r", "-q")
    assert code == 2 and err.count("\n") == 1, err
    assert "--workers 2: the local Dask cluster did not start (Nanny failed to start.)" in err
    assert seen == {"logs": False, "workers_quiet": True}
    assert _levels() == before
    assert not (tmp_path / "r").exists()


class _Client:
    closed = False

    def close(self) -> None:
        _Client.closed = True


def test_a_worker_that_keeps_dying_is_one_line(cli, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def dying(*args: object, **kwargs: object) -> None:
        raise distributed.KilledWorker("ingest-0f08", None, 3)

    monkeypatch.setattr(driver, "connect", lambda *a: _Client())
    monkeypatch.setattr(driver, "replay_distributed", dying)
    before = _levels()
    code, _, err = cli("replay", TRACE, "--hw", "mtia300", "--workers", "2", "--out",
                       tmp_path / "r", "-q")
    assert code == 2 and err.count("\n") == 1, err
    assert "a Dask worker died repeatedly running ingest-0f08 (4 tries)" in err
    assert _Client.closed and _levels() == before
