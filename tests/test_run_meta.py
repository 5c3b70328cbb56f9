"""`RunMeta`: the typed run.json. Round trip, tolerant reading of older layouts, strict writing."""

from __future__ import annotations

import msgspec
import orjson
import pytest
from runfixture import tiny_meta, tiny_tables

from mtia_trace import run_meta
from mtia_trace.run_meta import META_VERSION, RunMeta
from mtia_trace.storage import open_run, write_run


def test_a_writers_dict_round_trips_through_run_json(tmp_path) -> None:
    run = write_run(tiny_tables(), tmp_path / "r", tiny_meta())
    stored = orjson.loads((run.path / "run.json").read_bytes())
    assert stored["meta_version"] == META_VERSION
    # the small structs keep exactly the keys the writer gave
    assert stored["options"] == tiny_meta()["options"]
    assert stored["traces"] == tiny_meta()["traces"]
    assert open_run(run.path).meta == run.meta == run_meta.decode(run_meta.encode(run.meta))


def test_a_field_that_is_not_in_runmeta_is_refused_when_writing(tmp_path) -> None:
    with pytest.raises(AssertionError, match=r"\['whatever'\] are not in RunMeta"):
        write_run(tiny_tables(), tmp_path / "r", {**tiny_meta(), "whatever": 1})
    assert not (tmp_path / "r").exists()


def test_a_wrong_type_is_refused_when_writing(tmp_path) -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.seed"):
        write_run(tiny_tables(), tmp_path / "r", {**tiny_meta(), "seed": "one"})


def test_older_and_newer_layouts_decode() -> None:
    # before meta_version: the spec itself under "hardware", bare trace paths, no versions
    old = run_meta.decode(orjson.dumps({"hardware": {"name": "h100", "values": {}},
                                        "traces": ["/a/rank0.json"], "seed": 3}))
    assert (old.hardware, old.spec["name"], old.trace_names, old.seed) == (
        "h100", "h100", ["rank0.json"], 3)
    assert old.options.mode is None and old.assumptions.model is None
    # a newer writer's extra field is ignored, not an error
    new = run_meta.decode(orjson.dumps({"meta_version": META_VERSION + 1, "later": {"x": 1}}))
    assert new.meta_version == META_VERSION + 1 and new.hardware == "as-measured"


def test_not_an_object_is_a_decode_error() -> None:
    with pytest.raises(msgspec.ValidationError):
        run_meta.decode(b"[1, 2]")


def test_numpy_values_from_the_cost_model_are_plain_json(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    meta = {**tiny_meta(), "assumptions": {"model": {"priced": np.int64(7), "f": np.float32(0.5)}}}
    run = write_run(tiny_tables(), tmp_path / "r", meta)
    assert isinstance(run.meta, RunMeta)
    assert run.meta.assumptions.model == {"priced": 7, "f": 0.5}
