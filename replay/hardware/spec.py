"""Hardware spec files: TOML tables in which every number carries its source and a confidence.

A spec file looks like::

    name = "h100"
    family = "gpu"
    description = "..."

    [hbm]
    bandwidth_GBps = { value = 3350, source = "NVIDIA H100 SXM datasheet", confidence = "published" }

Keys are addressed as ``section.field`` (``hbm.bandwidth_GBps``). ``confidence`` is one of
``published`` / ``derived`` (the source shows the arithmetic) / ``calibrated`` (fitted to
published measurements under one named mechanism; the source names the tables and the fitting
script) / ``assumed`` (a modelling choice, worth sweeping). An entry may list ``choices`` for string values. ``--set key=value`` overrides
replace a value after type checking; the overridden entry's confidence becomes ``override``.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from mtia_trace.errors import HardwareSpecError

CONFIDENCES = ("published", "derived", "calibrated", "assumed")
Value = float | int | str | bool

#: Keys every spec must define (other engineers' code and the cost model rely on them).
REQUIRED_KEYS: tuple[str, ...] = (
    "compute.peak_tflops_fp8",
    "compute.peak_tflops_bf16",
    "compute.peak_tflops_fp32",
    "compute.efficiency_gemm",
    "compute.efficiency_other",
    "hbm.bandwidth_GBps",
    "hbm.capacity_GB",
    "hbm.efficiency",
    "hbm.gather_ceiling",
    "hbm.gather_concurrency_GBps",
    "hbm.gather_backward_concurrency_GBps",
    "cache.capacity_MB",
    "cache.bandwidth_GBps",
    "cache.zipf_alpha",
    "cache.working_set_GB",
    "cache.row_bytes",
    "host.kernel_launch_us",
    "host.link_GBps",
    "network.ranks_per_node",
    "network.intra_node_GBps",
    "network.inter_node_GBps",
    "network.intra_node_via_nic",
    *(f"network.{c}_{a}_{p}_us" for c in ("intra", "inter") for a in ("ring", "tree")
      for p in ("ll", "ll128", "simple")),
    "comm.path",
    *(f"comm.{a}_base_{p}_us" for a in ("ring", "tree") for p in ("ll", "ll128", "simple")),
    "comm.post_us",
    "comm.channels",
    *(f"comm.channel_{p}_bytes" for p in ("ll", "ll128", "simple")),
    "comm.ll_max_1node_GBps",
    "comm.ll_max_2node_GBps",
    "comm.ll_max_GBps",
    "comm.ll128_channel_GBps",
    "comm.tree_channel_1node_GBps",
    "comm.tree_channel_2node_GBps",
    "comm.tree_channel_GBps",
    "comm.tree_ll128_channel_1node_GBps",
    "comm.tree_ll128_channel_2node_GBps",
    "comm.tree_ll128_channel_GBps",
    "comm.ring_plateau",
    "comm.tree_shape",
    "comm.fill_chunks",
    "comm.fill_chunk_bytes",
    "comm.group_launch_us",
    "comm.intra_efficiency",
    "comm.inter_efficiency",
    "comm.algorithm",
    "comm.protocol",
    "loss.recovery",
    "loss.mtu_bytes",
    "loss.rtt_us",
    "interference.hbm_bytes_per_wire_byte",
)

#: Extra keys required by the communication path.
PATH_KEYS: dict[str, tuple[str, ...]] = {
    "offloaded": ("comm.message_engines", "comm.engines_per_collective", "comm.engine_reduction_GBps",
                  "comm.overlap_slowdown"),
    "on_compute": ("comm.sm_count", "comm.comm_ctas", "comm.mem_contention",
                   "comm.concurrent_collectives", "comm.reduction_GBps",
                   "interference.gemm_tile_m", "interference.gemm_tile_n",
                   "interference.split_k_min_k"),
}

#: Optional groups: NVSwitch reduction (NVLS) when ``comm.nvls_efficiency`` is given, and the
#: CollNet latencies a spec needs before ``comm.collnet = true`` can be set.
NVLS_KEYS: tuple[str, ...] = ("comm.nvls_efficiency", "network.nvls_us",
                              "network.nvls_tree_inter_us", "comm.nvls_tree_channel_2node_GBps",
                              "comm.nvls_tree_channel_GBps", "comm.nvls_placement")
COLLNET_KEYS: tuple[str, ...] = ("comm.collnet", "network.collnet_intra_us",
                                 "network.collnet_inter_us")

#: Allowed string values, checked at load and on --set.
CHOICES: dict[str, tuple[str, ...]] = {
    "comm.path": ("offloaded", "on_compute"),
    "comm.algorithm": ("auto", "ring", "tree", "nvls", "nvls_tree", "collnet", "hierarchical"),
    "comm.protocol": ("auto", "ll", "ll128", "simple"),
    "comm.nvls_placement": ("balanced", "chunked"),
    "comm.ring_ll_share": ("half", "quarter"),
    "comm.tree_shape": ("chain", "binary"),
    "loss.recovery": ("go_back_n", "selective_repeat"),
    "loss.rto_model": ("fixed", "adaptive"),
    "comm.link_sharing": ("fifo", "split"),
}

#: Keys that must lie in (0, 1].
FRACTIONS = ("compute.efficiency_gemm", "compute.efficiency_other", "hbm.efficiency",
             "hbm.gather_ceiling", "comm.intra_efficiency",
             "comm.inter_efficiency")


@dataclass
class Entry:
    value: Value
    source: str
    confidence: str
    choices: tuple[str, ...] = ()


@dataclass
class HardwareSpec:
    """A loaded hardware spec: ``value(key)``, ``source(key)``, ``confidence(key)``."""

    name: str
    family: str
    description: str
    origin: str
    entries: dict[str, Entry] = field(default_factory=dict)
    overrides: tuple[str, ...] = ()

    def _entry(self, key: str) -> Entry:
        try:
            return self.entries[key]
        except KeyError:
            raise HardwareSpecError(
                f"{self.origin}: no key {key!r}; known keys: {', '.join(sorted(self.entries))}"
            ) from None

    def value(self, key: str) -> Value:
        return self._entry(key).value

    def get(self, key: str, default: Value | None = None) -> Value | None:
        e = self.entries.get(key)
        return default if e is None else e.value

    def source(self, key: str) -> str:
        return self._entry(key).source

    def confidence(self, key: str) -> str:
        return self._entry(key).confidence

    def keys(self) -> list[str]:
        return list(self.entries)

    def assumed(self) -> list[str]:
        """Keys whose value is not a published or derived figure: fitted to shared measurements
        (calibrated), a modelling choice (assumed) or a --set override."""
        return [k for k, e in self.entries.items()
                if e.confidence in ("calibrated", "assumed", "override")]

    def to_dict(self) -> dict[str, object]:
        """The full spec with sources, for run.json."""
        return {
            "name": self.name, "family": self.family, "description": self.description,
            "origin": self.origin, "overrides": list(self.overrides),
            "values": {k: {"value": _jsonable(e.value), "source": e.source,
                           "confidence": e.confidence} for k, e in self.entries.items()},
        }

    def with_overrides(self, overrides: list[str] | tuple[str, ...]) -> HardwareSpec:
        """A copy with ``key=value`` overrides applied (type-checked)."""
        out = copy.deepcopy(self)
        for item in overrides:
            key, text = _split_override(item)
            entry = out.entries.get(key)
            if entry is None:
                near = difflib.get_close_matches(key, list(self.entries), n=1, cutoff=0.6)
                hint = f"did you mean {near[0]}? " if near else ""
                raise HardwareSpecError(
                    f"--set {item}: {self.name} has no key {key!r}; {hint}run `mtia-trace hw "
                    f"show {self.name}` to list keys")
            new = _parse_like(entry, key, text, item)
            validate_value(key, new, f"--set {item}")
            out.entries[key] = Entry(new, f"--set {key}={text} (was {entry.value})", "override",
                                     entry.choices)
        out.overrides = tuple(self.overrides) + tuple(overrides)
        _check_values(out)
        return out


def _jsonable(v: Value) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _split_override(item: str) -> tuple[str, str]:
    key, sep, text = item.partition("=")
    key, text = key.strip(), text.strip()
    if not sep or not key or not text:
        raise HardwareSpecError(f"--set {item!r}: expected key=value, e.g. comm.message_engines=8")
    return key, text


def _parse_like(entry: Entry, key: str, text: str, item: str) -> Value:
    """Parse ``text`` with the type of the entry's current value."""
    old = entry.value
    try:
        if isinstance(old, bool):
            low = text.lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError
            return low in ("true", "1")
        if isinstance(old, int):
            f = float(text)
            if not f.is_integer():
                raise ValueError
            return int(f)
        if isinstance(old, float):
            return float(text)
    except ValueError:
        raise HardwareSpecError(
            f"--set {item}: {key} takes {'an integer' if isinstance(old, int) and not isinstance(old, bool) else type(old).__name__}, "
            f"got {text!r}; e.g. {key}={old}") from None
    choices = entry.choices or CHOICES.get(key, ())
    if choices and text not in choices:
        raise HardwareSpecError(f"--set {item}: {key} must be one of {', '.join(choices)}")
    return text


def _check_keys(spec: HardwareSpec) -> None:
    path = spec.entries["comm.path"].value if "comm.path" in spec.entries else "offloaded"
    needed = REQUIRED_KEYS + PATH_KEYS.get(str(path), ())
    missing = [k for k in needed if k not in spec.entries]
    if "loss.rto_us" not in spec.entries and "loss.ib_timeout" not in spec.entries:
        missing.append("loss.rto_us (or loss.ib_timeout)")
    if any(k in spec.entries for k in NVLS_KEYS):
        missing += [k for k in NVLS_KEYS if k not in spec.entries]
    if spec.entries.get("comm.collnet") and spec.entries["comm.collnet"].value:
        missing += [k for k in COLLNET_KEYS[1:] if k not in spec.entries]
    rto = spec.entries.get("loss.rto_model")
    if rto is not None and rto.value == "adaptive" and "loss.adaptive_rto_us" not in spec.entries:
        missing.append("loss.adaptive_rto_us (loss.rto_model is adaptive)")
    if missing:
        raise HardwareSpecError(f"{spec.origin}: missing keys {', '.join(missing)}; copy them "
                                f"from a bundled spec (mtia-trace hw show h100 / mtia300)")


def _check_values(spec: HardwareSpec) -> None:
    _check_keys(spec)
    for key, e in spec.entries.items():
        v = e.value
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if math.isnan(v) or v < 0:
                raise HardwareSpecError(f"{spec.origin}: {key} = {v} is negative or NaN; "
                                        f"give a value >= 0")
        choices = e.choices or CHOICES.get(key, ())
        if choices and v not in choices:
            raise HardwareSpecError(f"{spec.origin}: {key} = {v!r}; must be one of "
                                    f"{', '.join(choices)}")
    for key in FRACTIONS:
        v = spec.entries[key].value if key in spec.entries else None
        if v is not None and not (0 < float(v) <= 1):  # type: ignore[arg-type]
            raise HardwareSpecError(f"{spec.origin}: {key} = {v} must be in (0, 1]")
    for key in ("hbm.bandwidth_GBps", "network.intra_node_GBps", "network.inter_node_GBps",
                "compute.peak_tflops_bf16", "network.ranks_per_node", "loss.mtu_bytes",
                "comm.channels", "comm.message_engines", "comm.engines_per_collective",
                "comm.engine_reduction_GBps", "comm.reduction_GBps", "comm.ll_max_1node_GBps",
                "comm.ll_max_2node_GBps", "comm.ll_max_GBps", "comm.ll128_channel_GBps",
                "comm.tree_channel_1node_GBps", "comm.tree_channel_2node_GBps",
                "comm.tree_channel_GBps", "comm.tree_ll128_channel_1node_GBps",
                "comm.tree_ll128_channel_2node_GBps", "comm.tree_ll128_channel_GBps"):
        if key in spec.entries and float(spec.entries[key].value) <= 0:  # type: ignore[arg-type]
            raise HardwareSpecError(f"{spec.origin}: {key} must be > 0")


def _parse(doc: dict[str, object], origin: str) -> HardwareSpec:
    validate_doc(doc, origin)
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise HardwareSpecError(f"{origin}: missing top-level name = \"...\"; add one")
    family = str(doc.get("family", "gpu"))
    if family not in ("mtia", "gpu"):
        raise HardwareSpecError(f"{origin}: family = {family!r}; must be mtia or gpu")
    spec = HardwareSpec(name=name, family=family, description=str(doc.get("description", "")),
                        origin=origin)
    for section, body in doc.items():
        if section in ("name", "family", "description"):
            continue
        if not isinstance(body, dict):
            raise HardwareSpecError(f"{origin}: top-level key {section!r} is not a [section]; "
                                    f"put numbers inside sections like [hbm]")
        for fname, raw in body.items():
            key = f"{section}.{fname}"
            if not isinstance(raw, dict) or "value" not in raw:
                raise HardwareSpecError(
                    f"{origin}: {key} must be {{ value = ..., source = \"...\", "
                    f"confidence = \"published|derived|calibrated|assumed\" }}")
            src, conf = raw.get("source"), raw.get("confidence")
            if not isinstance(src, str) or not src.strip():
                raise HardwareSpecError(f"{origin}: {key} has no source; say where the number "
                                        f"comes from")
            if conf not in CONFIDENCES:
                raise HardwareSpecError(f"{origin}: {key} confidence = {conf!r}; must be one of "
                                        f"{', '.join(CONFIDENCES)}")
            value = raw["value"]
            if not isinstance(value, (int, float, str, bool)):
                raise HardwareSpecError(f"{origin}: {key} value must be a number, string or bool")
            choices = tuple(raw.get("choices", ()))  # type: ignore[arg-type]
            spec.entries[key] = Entry(value, src, str(conf), choices)
    _check_values(spec)
    return spec


def _bundled_dir() -> Path:
    return Path(str(resources.files("replay.hardware") / "specs"))


def list_specs() -> list[str]:
    """Names of the bundled specs."""
    return sorted(p.stem for p in _bundled_dir().glob("*.toml"))


def load_spec(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> HardwareSpec:
    """Load a bundled spec by name or a spec file by path, then apply ``--set`` overrides."""
    text = str(name_or_path)
    path = _bundled_dir() / f"{text}.toml"
    if not _is_file(path):
        path = Path(text)
        if not _is_file(path):
            raise HardwareSpecError(f"{text}: no such hardware spec; use one of "
                                    f"{', '.join(list_specs())} or a path to a .toml file")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise HardwareSpecError(f"{path}: not valid TOML ({exc}); fix the file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareSpecError(f"{path}: cannot read ({exc})") from None
    spec = _parse(doc, str(path) if path.parent != _bundled_dir() else f"{path.stem} (bundled)")
    return spec.with_overrides(list(overrides)) if overrides else spec


def _is_file(path: Path) -> bool:
    """``path.is_file()``, false for a name the file system cannot hold (too long)."""
    try:
        return path.is_file()
    except OSError:
        return False


# -- typed validation of every value --------------------------------------------------------
#
# A spec file is decoded into msgspec Structs built from the bundled specs' keys (the schema of
# names) and `rule_for` (type, range and unit per key): a wrong type, a value out of range or an
# unknown key fails at load with its ``$.section.field`` path, the allowed range and, for an
# unknown key, the nearest known one. ``--set`` values go through the same rules. A new key
# needs no code when its name ends in a known unit (``_us``, ``_GBps``, ...); otherwise add it
# to `RULES`.


@dataclass(frozen=True)
class Rule:
    """What a spec value may be: its type, closed/open range and unit."""

    kind: type  # float (ints accepted), int, bool or str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    unit: str = ""

    def annotation(self, choices: tuple[str, ...] = ()) -> object:
        if self.kind is bool:
            return bool
        if self.kind is str:
            return Literal[choices] if choices else str  # type: ignore[valid-type]
        meta: dict[str, Any] = {"gt" if self.lo_open else "ge": self.lo} if self.lo is not None else {}
        if self.hi is not None:
            meta["le"] = self.hi
        return Annotated[self.kind, msgspec.Meta(**meta)] if meta else self.kind

    def describe(self, choices: tuple[str, ...] = ()) -> str:
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return "one of " + ", ".join(choices) if choices else "a string"
        what = "an integer" if self.kind is int else "a number"
        lo = "" if self.lo is None else f"{'(' if self.lo_open else '['}{_num(self.lo)}"
        hi = "" if self.hi is None else f"{_num(self.hi)}]"
        rng = f" in {lo or '(-inf'}, {hi or 'inf)'}" if lo or hi else ""
        return what + rng + (f" {self.unit}" if self.unit else "")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) <= 1e7 else f"{v:g}"


# Lower bounds are physical floors, not just > 0: a "tiny" rate (1e-300 GB/s) would give
# infinite times; an upper bound far above any machine catches unit slips (TB/s for GB/s).
_COUNT = Rule(int, 1, 10**6, unit="(count)")
_FRACTION = Rule(float, 0.001, 1, unit="(fraction)")
#: Rules for keys whose name says nothing of their unit (exact keys, checked first).
RULES: dict[str, Rule] = {
    "cache.zipf_alpha": Rule(float, 0, 10, unit="(Zipf exponent)"),
    "cache.row_bytes": Rule(int, 1, 2**30, unit="bytes"),
    "comm.comm_ctas": Rule(int, 0, 10**6, unit="(count; 0 = no SMs reserved for communication)"),
    "comm.mem_contention": Rule(float, 0, 10, unit="(slowdown fraction)"),
    "comm.overlap_slowdown": Rule(float, 0, 10, unit="(slowdown fraction)"),
    "hbm.gather_ceiling": _FRACTION,
    "comm.ring_plateau": Rule(float, 0, 100, lo_open=True, unit="(latency factor)"),
    "loss.ib_timeout": Rule(int, 0, 31, unit="(exponent: RTO = 4.096 us x 2^n)"),
    "loss.mtu_bytes": Rule(int, 64, 2**20, unit="bytes"),
    "network.ranks_per_node": _COUNT,
}
#: Rules by the end of the field name (the unit), in order; the first match applies (any
#: ``*efficiency*`` key is a fraction).
SUFFIX_RULES: tuple[tuple[str, Rule], ...] = (
    ("_GBps", Rule(float, 0.001, 1e7, unit="GB/s")),
    ("_us", Rule(float, 0, 1e9, unit="us")),
    ("_MB", Rule(float, 1e-6, 1e9, unit="MB")),
    ("_GB", Rule(float, 1e-9, 1e7, unit="GB")),
    ("_bytes", Rule(int, 1, 2**40, unit="bytes")),
)
#: Integer counts (engines, links, SMs, channels...): at least 1.
COUNT_WORDS = ("engines", "links", "nics", "count", "ctas", "waves", "channels", "collectives")
#: Anything else numeric: finite and non-negative.
_NUMBER = Rule(float, 0, 1e15)


def rule_for(key: str, example: Value) -> Rule:
    """The rule for ``key`` (``example``: its value in a bundled spec, for the type)."""
    if key in RULES:
        return RULES[key]
    fname = key.partition(".")[2]
    if key.startswith("compute.peak_tflops"):
        return Rule(float, 1e-6, 1e6, unit="TFLOP/s")
    if isinstance(example, bool):
        return Rule(bool)
    if isinstance(example, str):
        return Rule(str)
    if "efficiency" in fname:
        return _FRACTION
    for suffix, rule in SUFFIX_RULES:
        if fname.endswith(suffix):
            return rule
    if isinstance(example, int) and any(w in fname for w in COUNT_WORDS):
        return _COUNT
    return _NUMBER


_CONFIDENCE = Literal["published", "derived", "calibrated", "assumed"]


@functools.lru_cache(maxsize=1)
def _schema() -> tuple[type, dict[str, tuple[Rule, tuple[str, ...]]]]:
    """(msgspec type of a spec file, key -> (rule, choices)), from the bundled specs' keys."""
    known: dict[str, tuple[Rule, tuple[str, ...]]] = {}
    for path in sorted(_bundled_dir().glob("*.toml")):
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        for section, body in doc.items():
            if not isinstance(body, dict):
                continue
            for fname, raw in body.items():
                key = f"{section}.{fname}"
                if key in known or not isinstance(raw, dict) or "value" not in raw:
                    continue
                choices = tuple(raw.get("choices", ())) or CHOICES.get(key, ())
                known[key] = (rule_for(key, raw["value"]), choices)
    sections: dict[str, list[tuple[str, object, None]]] = {}
    for key, (rule, choices) in known.items():
        section, fname = key.split(".", 1)
        entry = msgspec.defstruct(
            f"Entry_{section}_{fname}",
            [("value", rule.annotation(choices)),
             ("source", Annotated[str, msgspec.Meta(min_length=1)]),
             ("confidence", _CONFIDENCE), ("choices", list[str], [])],
            forbid_unknown_fields=True)
        sections.setdefault(section, []).append((fname, entry | None, None))
    fields: list[Any] = [("name", Annotated[str, msgspec.Meta(min_length=1)]),
              ("family", Literal["mtia", "gpu"], "gpu"), ("description", str, "")]
    fields += [(s, msgspec.defstruct(f"Section_{s}", f, forbid_unknown_fields=True) | None, None)
               for s, f in sections.items()]
    return msgspec.defstruct("SpecFile", fields, forbid_unknown_fields=True), known


_AT = re.compile(r"^(?P<what>.*?) - at `\$(?P<path>[^`]*)`$")


def _explain(origin: str, doc: dict[str, object], exc: msgspec.ValidationError) -> str:
    """One line for a failed typed decode: the key, its value, the allowed range or near keys."""
    _, known = _schema()
    m = _AT.match(str(exc))
    what, path = (m.group("what"), m.group("path")) if m else (str(exc), "")
    parts = [p for p in path.split(".") if p]
    unknown = re.match(r"Object contains unknown field `(.+)`", what)
    if unknown:
        name = unknown.group(1)
        if not parts:  # a top-level key
            options = sorted({k.split(".")[0] for k in known} | {"name", "family", "description"})
            near = difflib.get_close_matches(name, options, n=1)
            hint = f"did you mean [{near[0]}]?" if near else f"sections: {', '.join(options)}"
            return f"{origin}: unknown section {name!r} (at $.{name}); {hint}"
        if len(parts) == 1:
            key = f"{parts[0]}.{name}"
            options = [k for k in known if k.startswith(parts[0] + ".")]
            near = difflib.get_close_matches(key, options, n=1, cutoff=0.6) or \
                difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
            hint = (f"did you mean {near[0]}?" if near else
                    "no key of that name is read by the model")
            return (f"{origin}: unknown key {key} (at $.{key}); {hint} "
                    "(`mtia-trace hw show h100` lists the keys)")
        return f"{origin}: {'.'.join(parts)}: unknown field {name!r}; an entry has value, " \
               "source, confidence and (for strings) choices"
    if len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in known:
        key = f"{parts[0]}.{parts[1]}"
        rule, choices = known[key]
        body = doc.get(parts[0])
        raw = body.get(parts[1]) if isinstance(body, dict) else None
        if len(parts) == 2:
            missing = re.search(r"missing required field `(\w+)`", what)
            if missing and missing.group(1) == "source":
                return f"{origin}: {key} has no source; say where the number comes from"
            return (f"{origin}: {key} must be {{ value = ..., source = \"...\", confidence = "
                    f"\"published|derived|calibrated|assumed\" }} (at $.{key}); value: {rule.describe(choices)}")
        if parts[2] == "value":
            got = raw.get("value") if isinstance(raw, dict) else raw
            return (f"{origin}: {key} = {got!r}: {what.lower()} (at $.{key}.value); "
                    f"allowed: {rule.describe(choices)}")
        if parts[2] == "confidence":
            return f"{origin}: {key}: confidence must be one of {', '.join(CONFIDENCES)}"
        return f"{origin}: {key}.{parts[2]}: {what.lower()}; say where the number comes from"
    return f"{origin}: {what} (at ${path}); fix the spec file"


def validate_doc(doc: dict[str, object], origin: str) -> None:
    """Decode a spec file's TOML into the typed schema; raise `HardwareSpecError` on any error."""
    spec_type, _ = _schema()
    try:
        msgspec.convert(doc, spec_type)
    except msgspec.ValidationError as exc:
        raise HardwareSpecError(_explain(origin, doc, exc)) from None


def validate_value(key: str, value: Value, origin: str) -> None:
    """Check one (overridden) value against its key's rule."""
    _, known = _schema()
    if key not in known:
        return  # a user spec's own key already failed at load; nothing to check here
    section, fname = key.split(".", 1)
    validate_doc({"name": "override", section: {fname: {"value": value, "source": origin,
                                                       "confidence": "assumed"}}}, origin)
