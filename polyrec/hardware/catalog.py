"""The hardware catalog: one TOML data file per SKU under ``devices/``, validated into DeviceSpecs.

A data file names the device and gives every number as a table with its unit and source::

    name = "H200"
    full_name = "NVIDIA H200 SXM 141GB"
    vendor = "nvidia"
    arch = "sm_90"
    match_names = ["H200"]

    [triton]
    backend = "cuda"
    arch = 90
    warp_size = 32

    [sources]                       # short names for the URLs used below
    datasheet = "https://..."

    [hbm_bandwidth]
    value = 4.8e12
    unit = "B/s"
    source = "datasheet"            # a key of [sources], or a URL / note written in full

    [peak_flops.bf16]
    value = 989.4e12
    unit = "FLOP/s"
    source = "datasheet"

Adding a device is adding one such file. Every error names the file and the field.
"""

from __future__ import annotations

import functools
import math
import tomllib
from pathlib import Path
from typing import Any

from polyrec.hardware.types import PEAK_DTYPES, DeviceSpec, TritonTarget

DEVICES_DIR = Path(__file__).with_name("devices")

#: Numeric fields of a data file and the unit each must be written in.
NUMERIC_FIELDS: dict[str, str] = {
    "compute_units": "count",
    "warp_size": "threads",
    "registers_per_cu": "registers",
    "max_registers_per_thread": "registers",
    "smem_per_block": "bytes",
    "smem_per_cu": "bytes",
    "l2_bytes": "bytes",
    "infinity_cache_bytes": "bytes",
    "xcd_count": "count",
    "hbm_bytes": "bytes",
    "hbm_bandwidth": "B/s",
    "boost_clock_hz": "Hz",
    "scaleup_bandwidth": "B/s",
    "host_link_bandwidth": "B/s",
    "tdp_watts": "W",
}
#: Fields that must be whole numbers.
INTEGER_FIELDS = frozenset(
    {"compute_units", "warp_size", "registers_per_cu", "max_registers_per_thread", "smem_per_block",
     "smem_per_cu", "l2_bytes", "infinity_cache_bytes", "xcd_count", "hbm_bytes"}
)
#: Numeric fields a data file may leave out, and the value they then take.
OPTIONAL_DEFAULTS: dict[str, float] = {"infinity_cache_bytes": 0, "xcd_count": 1}
#: Numeric fields that may be 0: the optional ones, and the scale-up link a PCIe-only card lacks (types.py:
#: 0 = none; the planner then prices collectives over PCIe).
ZERO_ALLOWED = frozenset({*OPTIONAL_DEFAULTS, "scaleup_bandwidth"})
STRING_FIELDS = ("name", "full_name", "vendor", "arch")
#: Every key a data file may have at its top level: any other is a typo that would go unseen.
KNOWN_FIELDS = frozenset({*STRING_FIELDS, *NUMERIC_FIELDS, "match_names", "sources", "triton", "peak_flops"})
VENDORS = ("nvidia", "amd")
TRITON_BACKENDS = {"nvidia": "cuda", "amd": "hip"}


class CatalogError(ValueError):
    """A data file that is malformed; the message names the file and the field."""

    def __init__(self, path: Path, field_name: str, message: str):
        super().__init__(f"{path}: field '{field_name}': {message}")
        self.path = path
        self.field_name = field_name


class UnknownDeviceError(KeyError):
    """A device name that is not in the catalog; the message lists the valid names."""

    def __init__(self, name: str, valid: list[str]):
        super().__init__(name)
        self.name = name
        self.valid = valid

    def __str__(self) -> str:
        return f"unknown device '{self.name}'; valid names: {', '.join(self.valid)}"


def _resolve_source(path: Path, where: str, source: Any, named: dict[str, str]) -> str:
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(path, where, "needs a non-empty 'source' (URL or a key of [sources])")
    return named.get(source, source)


def _quantity(path: Path, where: str, entry: Any, unit: str, named: dict[str, str]) -> tuple[float, str]:
    """Validate one ``{value, unit, source}`` table; return (value, resolved source)."""
    if not isinstance(entry, dict):
        raise CatalogError(path, where, f"must be a table with value, unit = \"{unit}\" and source")
    extra = set(entry) - {"value", "unit", "source", "note"}
    if extra:
        raise CatalogError(path, where, f"unexpected keys {sorted(extra)}")
    value = entry.get("value")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(path, where, f"'value' must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise CatalogError(path, where, f"'value' must be a finite number >= 0, got {value!r}")
    if entry.get("unit") != unit:
        raise CatalogError(path, where, f"'unit' must be \"{unit}\", got {entry.get('unit')!r}")
    return value, _resolve_source(path, where, entry.get("source"), named)


def _triton_target(path: Path, vendor: str, data: Any) -> TritonTarget:
    if not isinstance(data, dict):
        raise CatalogError(path, "triton", "missing table [triton] with backend, arch, warp_size")
    backend, arch, warp = data.get("backend"), data.get("arch"), data.get("warp_size")
    if backend != TRITON_BACKENDS[vendor]:
        raise CatalogError(path, "triton.backend", f"must be '{TRITON_BACKENDS[vendor]}' for {vendor}")
    if backend == "cuda" and not isinstance(arch, int):
        raise CatalogError(path, "triton.arch", f"must be an integer like 90 for cuda, got {arch!r}")
    if backend == "hip" and not (isinstance(arch, str) and arch.startswith("gfx")):
        raise CatalogError(path, "triton.arch", f"must be a string like 'gfx942' for hip, got {arch!r}")
    if isinstance(warp, bool) or warp not in (32, 64):
        raise CatalogError(path, "triton.warp_size", f"must be 32 or 64, got {warp!r}")
    return TritonTarget(backend=backend, arch=arch, warp_size=int(warp))  # a whole float, as INTEGER_FIELDS take


def parse_device(path: Path, data: dict[str, Any]) -> DeviceSpec:
    """Validate the parsed TOML of one data file into a DeviceSpec."""
    named = data.get("sources", {})
    if not isinstance(named, dict) or not all(isinstance(v, str) for v in named.values()):
        raise CatalogError(path, "sources", "must be a table of name = \"URL\"")
    strings = {}
    for key in STRING_FIELDS:
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise CatalogError(path, key, "missing or not a non-empty string")
        strings[key] = value
    if strings["vendor"] not in VENDORS:
        raise CatalogError(path, "vendor", f"must be one of {VENDORS}, got {strings['vendor']!r}")
    match_names = data.get("match_names", [])
    if not isinstance(match_names, list) or not all(isinstance(m, str) and m for m in match_names):
        raise CatalogError(path, "match_names", "must be a list of non-empty strings")
    sources: dict[str, str] = {}
    numbers: dict[str, float] = {}
    for key, unit in NUMERIC_FIELDS.items():
        if key not in data and key in OPTIONAL_DEFAULTS:
            numbers[key] = OPTIONAL_DEFAULTS[key]
            sources[key] = "not applicable (default)"
            continue
        if key not in data:
            raise CatalogError(path, key, f"missing; expected a table with value, unit = \"{unit}\", source")
        value, sources[key] = _quantity(path, key, data[key], unit, named)
        if value == 0 and key not in ZERO_ALLOWED:  # a size, a rate or a count every device has
            raise CatalogError(path, key, "'value' must be > 0")
        if key in INTEGER_FIELDS and value != int(value):
            raise CatalogError(path, key, f"must be a whole number, got {value!r}")
        numbers[key] = int(value) if key in INTEGER_FIELDS else float(value)
    peaks = data.get("peak_flops")
    if not isinstance(peaks, dict):
        raise CatalogError(path, "peak_flops", f"missing table with entries {PEAK_DTYPES}")
    peak_flops: dict[str, float] = {}
    for dtype in PEAK_DTYPES:
        where = f"peak_flops.{dtype}"
        if dtype not in peaks:
            raise CatalogError(path, where, "missing (write value = 0 where the dtype is unsupported)")
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        value, sources[where] = _quantity(path, where, peaks[dtype], unit, named)
        peak_flops[dtype] = float(value)
    unknown = set(peaks) - set(PEAK_DTYPES)
    if unknown:
        raise CatalogError(path, "peak_flops", f"unknown dtypes {sorted(unknown)}; known: {PEAK_DTYPES}")
    triton = _triton_target(path, strings["vendor"], data.get("triton"))
    if triton.warp_size != numbers["warp_size"]:
        raise CatalogError(path, "triton.warp_size", "differs from warp_size")
    stray = sorted(set(data) - KNOWN_FIELDS)  # after the checks, so a misspelt required field is said missing
    if stray:
        raise CatalogError(path, stray[0], f"unknown field; known: {sorted(KNOWN_FIELDS)}")
    return DeviceSpec(
        **strings,
        match_names=tuple(match_names),
        triton=triton,
        peak_flops=peak_flops,
        sources=sources,
        **numbers,
    )


def load_device_file(path: Path) -> DeviceSpec:
    """Read and validate one data file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise CatalogError(path, "<file>", f"not valid TOML: {err}") from err
    return parse_device(path, data)


def load_catalog(directory: Path = DEVICES_DIR) -> dict[str, DeviceSpec]:
    """All devices of a catalog directory, keyed by name; names must be unique."""
    specs: dict[str, DeviceSpec] = {}
    for path in sorted(directory.glob("*.toml")):
        spec = load_device_file(path)
        if spec.name.lower() in (n.lower() for n in specs):
            raise CatalogError(path, "name", f"'{spec.name}' is already defined by another file")
        specs[spec.name] = spec
    return specs


@functools.cache
def catalog() -> dict[str, DeviceSpec]:
    """The packaged catalog, loaded once."""
    return load_catalog()


def get_device(name: str) -> DeviceSpec:
    """Look a device up by name, case-insensitively; unknown names list the valid ones."""
    specs = catalog()
    for key, spec in specs.items():
        if key.lower() == name.strip().lower():
            return spec
    raise UnknownDeviceError(name, sorted(specs))
