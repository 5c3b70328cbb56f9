"""Spec files: every bundled spec loads, every number has a source, overrides are type-checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mtia_trace.errors import HardwareSpecError
from replay.hardware import list_specs, load_spec
from replay.hardware.spec import CONFIDENCES, REQUIRED_KEYS

SYNTH_KEYS = ("compute.peak_tflops_bf16", "compute.peak_tflops_fp32", "compute.efficiency_gemm",
              "hbm.bandwidth_GBps", "hbm.efficiency", "hbm.gather_ceiling",
              "host.kernel_launch_us", "network.ranks_per_node", "network.intra_node_GBps",
              "network.inter_node_GBps", "network.intra_ring_simple_us")


def test_bundled_specs_listed() -> None:
    assert set(list_specs()) >= {"mtia300", "h100", "h200", "mtia200"}


@pytest.mark.parametrize("name", list_specs())
def test_every_number_has_source_and_confidence(name: str) -> None:
    spec = load_spec(name)
    assert spec.name == name
    for key in (*REQUIRED_KEYS, *SYNTH_KEYS):
        assert spec.source(key).strip()
        assert spec.confidence(key) in CONFIDENCES
    json.dumps(spec.to_dict())  # stored in run.json
    assert set(spec.assumed()) == {k for k in spec.keys()
                                   if spec.confidence(k) in ("calibrated", "assumed")}


def test_published_headline_numbers() -> None:
    m, h = load_spec("mtia300"), load_spec("h100")
    assert m.value("hbm.bandwidth_GBps") == 6100 and m.confidence("hbm.bandwidth_GBps") == "published"
    assert m.value("comm.message_engines") == 16
    assert h.value("compute.peak_tflops_bf16") == pytest.approx(989.4)  # dense, not sparse
    assert load_spec("h200").value("hbm.bandwidth_GBps") == 4800


def test_override_typed_and_marked() -> None:
    s = load_spec("mtia300", ["comm.message_engines=8", "hbm.bandwidth_GBps=7000"])
    assert s.value("comm.message_engines") == 8 and isinstance(s.value("comm.message_engines"), int)
    assert s.value("hbm.bandwidth_GBps") == 7000.0
    assert s.confidence("comm.message_engines") == "override"
    assert "comm.message_engines" in s.assumed()
    assert load_spec("mtia300").value("comm.message_engines") == 16  # bundled copy untouched


@pytest.mark.parametrize("item, words", [
    ("comm.message_engines=eight", "integer"),
    ("comm.message_engines=8.5", "integer"),
    ("comm.path=nvlink", "one of"),
    ("no.such_key=1", "no key"),
    ("justtext", "key=value"),
    ("hbm.efficiency=1.5", "allowed: a number in [0.001, 1] (fraction)"),
    ("hbm.bandwidth_GBps=-1", "hbm.bandwidth_GBps = -1.0: expected `float` >= 0.001 (at "
                              "$.hbm.bandwidth_GBps.value); allowed: a number in [0.001, 10000000]"),
    ("hbm.bandwidth_GBps=inf", "expected `float` <= 10000000.0"),
    ("hbm.bandwidth_GBps=1e-300", "expected `float` >= 0.001"),
    ("compute.peak_tflops_fp32=0", "allowed: a number in [1e-06, 1000000] TFLOP/s"),
    ("comm.message_engines=0", "allowed: an integer in [1, 1000000] (count)"),
    ("loss.mtu_bytes=99999999999999999999", "allowed: an integer in [64, 1048576] bytes"),
    ("hbm.bandwith_GBps=3", "did you mean hbm.bandwidth_GBps?"),
    ("cache.zipf_alpha=nan", "cache.zipf_alpha = nan"),
])
def test_bad_override_is_one_line_error(item: str, words: str) -> None:
    with pytest.raises(HardwareSpecError) as exc:
        load_spec("mtia300", [item])
    msg = str(exc.value)
    assert words in msg and "\n" not in msg


@pytest.mark.parametrize("text, words", [
    ("name = 'x'\n[hbm]\nbandwidth_GBps = 5\n", "bandwidth_GBps must be"),
    ("name = 'x'\n[hbm]\nbandwidth_GBps = { value = 5, confidence = 'published' }\n", "no source"),
    ("name = 'x'\n[hbm]\nbandwidth_GBps = { value = 5, source = 's', confidence = 'guess' }\n",
     "confidence"),
    ("name = 'x'\n[hbm]\nbandwidth_GBps = { value = 5, source = 's', confidence = 'assumed' }\n",
     "missing keys"),
    ("name = [\n", "not valid TOML"),
    ("name = 'x'\n[hbm]\nbandwith_GBps = { value = 5, source = 's', confidence = 'assumed' }\n",
     r"unknown key hbm.bandwith_GBps \(at \$.hbm.bandwith_GBps\); did you mean hbm.bandwidth_GBps\?"),
    ("name = 'x'\n[hbmm]\n", r"unknown section 'hbmm' \(at \$.hbmm\); did you mean \[hbm\]\?"),
    ("name = 'x'\n[hbm]\nbandwidth_GBps = { value = '5', source = 's', confidence = 'assumed' }\n",
     r"hbm.bandwidth_GBps = '5': expected `float`, got `str` \(at \$.hbm.bandwidth_GBps.value\)"),
    ("name = 'x'\n[hbm]\nbandwidth_GBps = { value = 0, source = 's', confidence = 'assumed' }\n",
     r"allowed: a number in \[0.001, 10000000\] GB/s"),
    ("name = 'x'\n[comm]\npath = { value = 'nvlink', source = 's', confidence = 'assumed' }\n",
     "allowed: one of offloaded, on_compute"),
])
def test_spec_file_errors(tmp_path: Path, text: str, words: str) -> None:
    bad = tmp_path / "x.toml"
    bad.write_text(text)
    with pytest.raises(HardwareSpecError, match=words):
        load_spec(bad)


def test_unknown_spec_name() -> None:
    with pytest.raises(HardwareSpecError, match="no such hardware spec"):
        load_spec("tpu9")


def test_user_spec_file_by_path(tmp_path: Path) -> None:
    from importlib import resources
    src = Path(str(resources.files("replay.hardware") / "specs" / "h100.toml")).read_text()
    p = tmp_path / "mygpu.toml"
    p.write_text(src.replace('name = "h100"', 'name = "mygpu"'))
    assert load_spec(p).name == "mygpu"
