"""Source-hardware detection, scaled/roofline choice, group placement from pg_ranks, CLI flags."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mtia_trace.errors import HardwareSpecError
from replay.hardware import load_spec, model_for
from replay.hardware.collectives import parse_ranks, placement
from replay.hardware.source import (
    detect_source,
    resolve_source,
    spec_for_device,
    tag_source,
    tagged_source,
    with_source,
)
from tests.test_hardware_costs import PLAIN, coll, events

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "synth" / "dcnv2_train_2rank"


def _trace(*names: str, ev=None) -> SimpleNamespace:  # noqa: ANN001
    files = [SimpleNamespace(device_properties=[{"id": 0, "name": n}]) for n in names]
    return SimpleNamespace(files=files, events=ev)


@pytest.mark.parametrize("name, spec", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 SXM cluster", "h100"),
    ("NVIDIA H200", "h200"), ("Meta MTIA 300", "mtia300"), ("MTIA300", "mtia300"),
    ("ARTEMIS", "mtia200"), ("Meta MTIA 200 (MTIA v2 / 2i, inference, for context)", "mtia200"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100-PG509-200", "a100"),
    ("NVIDIA DGX A100", "a100"),  # what `synth --source-hw a100` declares
    ("Tesla V100-SXM2-32GB", "v100"), ("Tesla V100-PCIE-16GB", "v100"),
    ("NVIDIA DGX-1 (V100 SXM2)", "v100"), ("NVIDIA B200", "b200"),
    ("NVIDIA DGX/HGX B200", "b200"), ("NVIDIA GB200", "gb200"),
    ("NVIDIA GB200 NVL72", "gb200"),
    ("AMD Radeon Graphics", None), ("", None),
])
def test_spec_for_device(name: str, spec: str | None) -> None:
    assert spec_for_device(name) == spec


def test_detect_source_unique_or_none() -> None:
    assert detect_source(_trace("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3")) == "h100"
    assert detect_source(_trace("NVIDIA H100 80GB HBM3", "Meta MTIA 300")) is None  # mixed
    assert detect_source(_trace()) is None
    src, why = resolve_source(_trace("AMD Instinct MI250X"))
    assert src is None and "MI250X" in why and "--source-hw" in why
    assert resolve_source(_trace("Tesla V100-SXM2-32GB"), "h100") == ("h100", "--source-hw h100")


def test_bundled_synth_sample_declares_h100() -> None:
    from mtia_trace.ingest import load

    tr = load(SAMPLE)
    assert detect_source(tr) == "h100"
    ev, src, why = with_source(tr)
    assert src == "h100" and tagged_source(ev)[0] == "h100" and "deviceProperties" in why
    with pytest.raises(HardwareSpecError, match="no such hardware spec"):
        with_source(tr, "h999")


def test_auto_mode_scaled_with_source_roofline_without() -> None:
    ev = events([dict(kind="gemm", flops=1e9, dur_us=50.0, dtype="c10::BFloat16")])
    plain = model_for("mtia300").cost(ev)
    assert plain.notes["mode"] == "roofline" and "no source" in plain.notes["mode_reason"]
    assert plain.compute_us[0] == pytest.approx(1e9 / (600e6 * 0.75))
    tagged = model_for("mtia300").cost(tag_source(ev, "h100", "test"))
    assert tagged.notes["mode"] == "scaled" and "h100" in tagged.notes["mode_reason"]
    # measured 50 us x (mtia300 / h100 BF16 roofline) = 50 x 989.4 / 600
    assert tagged.dur_us[0] == pytest.approx(50.0 * 989.4 / 600.0)
    forced = model_for("mtia300", mode="roofline").cost(tag_source(ev, "h100"))
    assert forced.notes["mode"] == "roofline" and forced.dur_us[0] == plain.dur_us[0]
    # no device work measured (CPU-only): roofline even with a source
    cpu = events([dict(kind="gemm", is_device=False, flops=1e9, dur_us=50.0)])
    assert model_for("mtia300").cost(tag_source(cpu, "h100")).notes["mode"] == "roofline"


def test_parse_ranks() -> None:
    assert parse_ranks("[0, 1, 2, 3]") == [0, 1, 2, 3]
    assert parse_ranks("[0, 8, 16, ...]") is None
    assert parse_ranks(None) is None and parse_ranks("") is None


def test_placement_from_pg_ranks() -> None:
    import pyarrow as pa

    pg = pa.array(["[0, 8, 16, 24]", "[0, 1, 2, 3]", None, "[0, 1, ...]", "[6, 7, 8, 9]"])
    p, L, N = placement(pg, np.array([8, 2, 0, 0, 9]), 8)
    assert p.tolist() == [4, 4, 0, 0, 4]
    assert L.tolist() == [1, 4, 0, 0, 2] and N.tolist() == [4, 1, 0, 0, 2]


def test_strided_group_goes_over_the_nics() -> None:
    # 4 ranks, one per node: contiguous would say NVLink; the recorded list says 4 nodes
    spec = load_spec("h100", PLAIN)
    rows = [dict(coll("all_to_all", 8e6, 4), pg_ranks="[0, 8, 16, 24]"),
            dict(coll("all_to_all", 8e6, 4), pg_ranks="[0, 1, 2, 3]"),
            coll("all_to_all", 8e6, 4)]
    c = model_for(spec).cost(events(rows))
    assert c.collective_us[0] == pytest.approx(0.75 * 8e6 / 1e4)   # (p-1)/p S over 10 GB/s NIC
    assert c.collective_us[1] == pytest.approx(0.75 * 8e6 / 1e5)   # NVLink at 100 GB/s
    assert c.collective_us[2] == c.collective_us[1]                 # no list: contiguous
    assert c.notes["group_placement"] == {"from_pg_ranks": 2, "assumed_contiguous": 1}


def test_every_bundled_spec_detects_from_what_synth_declares() -> None:
    # `synth --source-hw NAME` writes the head of the spec's description as the device name;
    # a bundled spec that detection does not map back to silently loses scaled costing
    from replay.hardware import list_specs, load_spec

    for name in list_specs():
        head = str(load_spec(name).description).split(":")[0]
        assert spec_for_device(head) == name, (name, head)


HTA_V100 = (Path(__file__).resolve().parents[2] / "shared" / "traces" / "real" / "hta"
            / "df_index_resolver" / "df_index_resolver.json.gz")


@pytest.mark.skipif(not HTA_V100.exists(), reason="needs ../shared/traces/real/hta")
def test_hta_v100_trace_is_costed_scaled_on_its_own_spec() -> None:
    """HTA's V100 trace names its device "Tesla V100-SXM2-32GB": detected as v100, so a replay
    on another target scales every measured kernel (was: no source, roofline pricing only
    the few kernels with recorded flops/bytes)."""
    from mtia_trace.ingest import load

    tr = load(HTA_V100)
    ev, src, _ = with_source(tr)
    assert src == "v100"
    costs = model_for("h100").cost(ev)
    assert costs.notes["mode"] == "scaled"
    assert costs.notes["source_hw"] == "v100"
