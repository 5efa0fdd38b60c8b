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

Adding a device is adding one such file: to the package's ``devices/``, or, without editing the package, in a
folder named by ``$POLYREC_DEVICE_DIR`` or as ``--device-file PATH`` (``device_files``). Every error names the file
and the field.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence
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
#: A device name: letters, digits, '_', '.' and '-', from a letter or digit. It is the KIND of ``polyrec plan
#: --fleet KINDxCOUNT`` (planner/types.py, which reads no other characters) and the file name of the device's
#: calibration (calibrate.calibration_path), which a '/' or '..' would put outside the cache.
DEVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: A run of characters that no device name holds (those DEVICE_NAME lacks).
NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_.-]+")
#: The end of a device name that ``--fleet`` reads as a count: 'x' or 'X' and digits, after at least one
#: character (planner/types.py ``_FLEET_ITEM``, KINDxCOUNT: ``H200x8`` is 8 H200s). A whole entry that names a
#: device is that device (``RTX-4090``, not -4090 of 'RT'), so only a count that could be meant is refused.
FLEET_COUNT_ENDING = re.compile(r"(?<=.)([xX])([0-9]+)$")
#: Every key a data file may have at its top level: any other is a typo that would go unseen.
KNOWN_FIELDS = frozenset({*STRING_FIELDS, *NUMERIC_FIELDS, "match_names", "sources", "triton", "peak_flops"})
VENDORS = ("nvidia", "amd")
TRITON_BACKENDS = {"nvidia": "cuda", "amd": "hip"}
#: Warp sizes each Triton backend compiles for: NVIDIA's warp is 32 threads on every compute capability (CUDA C++
#: Programming Guide, "warpSize"); AMD's wavefront is 64 on CDNA (gfx9) and 32 on RDNA (gfx10-12, Triton's AMD
#: backend, ``warp_size``).
TRITON_WARP_SIZES = {"cuda": (32,), "hip": (32, 64)}

#: Each numeric field's range, [low, high] in its unit, beside 0 where ``ZERO_ALLOWED``. The catalog spans the
#: A100 to the MI355X; each bound lies far beyond (about 100x, or an architectural floor the kernels' config
#: spaces assume), so that a value outside is a slip (a unit, an exponent), which the models would price at
#: infinity or crash on (hbm_bandwidth = 1e-300 was a traceback in ``polyrec plan``; hbm_bytes = 1 printed
#: "-1.0 GB usable"). At each bound, an H200 file so edited plans MLPerf DLRM-DCNv2 and dcnv2-small without error
#: (checked one field at a time).
PLAUSIBLE_RANGES: dict[str, tuple[float, float]] = {
    "compute_units": (1, 100_000),  # SMs / CUs: catalog 108-304
    "warp_size": (32, 64),  # threads: TRITON_WARP_SIZES
    "registers_per_cu": (16_384, 16_777_216),  # 32-bit registers: catalog 65,536-131,072 (64 KiB-512 KiB)
    # registers: NVIDIA allows 255 since sm_35 (CUDA guide), CDNA 512; at 63 (sm_30's) the embedding selector
    # has no config (a traceback in `polyrec plan`); catalog 255-512
    "max_registers_per_thread": (128, 4096),
    # bytes: 48 KiB is CUDA's per-block default since Fermi (sm_20), below AMD's 64 KiB LDS; catalog 64-228 KiB
    "smem_per_block": (48 * 1024, 2**24),
    "smem_per_cu": (48 * 1024, 2**24),
    "l2_bytes": (2**20, 2**36),  # bytes: catalog 32-126 MiB
    "infinity_cache_bytes": (2**20, 2**38),  # bytes, where present: catalog 256 MiB
    "xcd_count": (1, 64),  # chiplets: catalog 1-8
    # bytes: 4 GB is 4x the planner's 1 GB context reserve (planner/memory.py CONTEXT_BYTES), and the least of
    # any data-center GPU since the Tesla K10 (2012, 4 GB per GPU); catalog 80-288 GB
    "hbm_bytes": (4e9, 1e14),
    "hbm_bandwidth": (1e10, 1e15),  # B/s: catalog 2.0-8.0 TB/s
    "boost_clock_hz": (1e8, 1e10),  # Hz: catalog 1.41-2.4 GHz
    "scaleup_bandwidth": (1e9, 1e14),  # B/s per direction, where present: catalog 300-900 GB/s
    "host_link_bandwidth": (1e9, 1e13),  # B/s per direction: PCIe 1.0 x4 to 150x PCIe 6.0 x16; catalog 32-64 GB/s
    "tdp_watts": (10, 100_000),  # W, board power (--compare divides by it): catalog 400-1,400
}
#: Range of a dense peak rate, FLOP/s (int8: OP/s), beside 0 (unsupported): catalog 19.5 TFLOP/s (A100 fp32) to
#: 5.0 POP/s (MI355X fp8 / int8).
PEAK_FLOPS_RANGE: tuple[float, float] = (1e11, 1e18)
#: Environment variable naming folders of extra data files in the catalog's format (``os.pathsep`` between
#: several), for devices the package lacks; read where the catalog is first loaded.
DEVICE_DIR_ENV = "POLYREC_DEVICE_DIR"
#: The data files ``device_files`` adds (``--device-file``), while its block runs.
_added_files: tuple[Path, ...] = ()


class CatalogError(ValueError):
    """A data file that is malformed; the message names the file and the field."""

    def __init__(self, path: Path, field_name: str, message: str):
        super().__init__(f"{path}: field '{field_name}': {message}")
        self.path = path
        self.field_name = field_name


class UnknownDeviceError(KeyError):
    """A device name that is not in the catalog; the message lists the valid devices, worded as `polyrec plan
    --fleet` and `--compare` word theirs (it said "valid names")."""

    def __init__(self, name: str, valid: list[str]):
        super().__init__(name)
        self.name = name
        self.valid = valid

    def __str__(self) -> str:
        return f"unknown device {self.name!r}; valid devices: {', '.join(self.valid)}"


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


def _check_range(path: Path, where: str, value: float, unit: str, bounds: tuple[float, float]) -> None:
    """Refuse a value outside ``bounds`` (``PLAUSIBLE_RANGES``, ``PEAK_FLOPS_RANGE``), naming them."""
    low, high = bounds
    if not low <= value <= high:
        raise CatalogError(path, where, f"'value' {value:g} {unit} is outside {low:g}-{high:g} {unit}, beyond any "
                                        "accelerator's (catalog.PLAUSIBLE_RANGES): a unit or an exponent slipped?")


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
    if isinstance(warp, bool) or warp not in TRITON_WARP_SIZES[backend]:
        sizes = " or ".join(map(str, TRITON_WARP_SIZES[backend]))
        raise CatalogError(path, "triton.warp_size", f"must be {sizes} for {backend} (catalog.TRITON_WARP_SIZES), "
                                                     f"got {warp!r}")
    return TritonTarget(backend=backend, arch=arch, warp_size=int(warp))  # a whole float, as INTEGER_FIELDS take


def fleet_safe(name: str) -> str:
    """``name`` with '_' put between the 'x' and the number that ``--fleet`` would read as a count
    (FLEET_COUNT_ENDING): H200x8 -> H200x_8; any other name as it is."""
    return FLEET_COUNT_ENDING.sub(r"\1_\2", name)


def device_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a device's name, or None: characters DEVICE_NAME lacks, or an ending that ``polyrec
    plan --fleet`` reads as a count (FLEET_COUNT_ENDING). Refused where a device is named, so that a fleet means
    the same devices whatever data files are loaded (``H200x8`` is 8 H200s, never one device named so)."""
    if not DEVICE_NAME.fullmatch(name):
        return (f"{name!r} is not a device name: letters, digits, '_', '.' and '-' only, from a letter or digit "
                "(catalog.DEVICE_NAME)")
    ending = FLEET_COUNT_ENDING.search(name)
    if ending is None:
        return None
    return (f"{name!r} ends in {ending.group(0)!r}, which `polyrec plan --fleet {name}` reads as {ending.group(2)} of device "
            f"{name[:ending.start()]!r} (KINDxCOUNT); name it so that it does not end in 'x' and a number, e.g. "
            f"{fleet_safe(name)!r} (a fleet of 8 of it: {fleet_safe(name)}x8)")


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
    problem = device_name_problem(strings["name"])
    if problem is not None:
        raise CatalogError(path, "name", problem)
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
        if value != 0:
            _check_range(path, key, value, unit, PLAUSIBLE_RANGES[key])
        numbers[key] = int(value) if key in INTEGER_FIELDS else float(value)
    if numbers["smem_per_block"] > numbers["smem_per_cu"]:  # a block runs on one SM / CU and uses its memory
        raise CatalogError(path, "smem_per_block", f"{numbers['smem_per_block']:,} bytes is more than smem_per_cu, "
                                                   f"{numbers['smem_per_cu']:,}: a block's shared memory / LDS is "
                                                   "its SM's / CU's")
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
        if value != 0:
            _check_range(path, where, value, unit, PEAK_FLOPS_RANGE)
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
    except OSError as err:  # an extra data file that is not there (--device-file)
        raise CatalogError(path, "<file>", f"cannot be read: {err.strerror or err}") from err
    return parse_device(path, data)


def same_name(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that is ``name`` (device names are compared without case, ``name``'s surrounding spaces
    taken off), or None."""
    wanted = name.strip().lower()
    return next((known for known in names if known.lower() == wanted), None)


def load_catalog(directory: Path = DEVICES_DIR) -> dict[str, DeviceSpec]:
    """All devices of a catalog directory, keyed by name; names must be unique."""
    specs: dict[str, DeviceSpec] = {}
    for path in sorted(directory.glob("*.toml")):
        spec = load_device_file(path)
        if same_name(spec.name, specs) is not None:
            raise CatalogError(path, "name", f"'{spec.name}' is already defined by another file")
        specs[spec.name] = spec
    return specs


def env_device_files() -> list[Path]:
    """The data files of the folders ``$POLYREC_DEVICE_DIR`` names; a folder that is not one, or holds none, is
    refused (a typo would otherwise leave its devices unknown in silence)."""
    files: list[Path] = []
    for folder in filter(None, os.environ.get(DEVICE_DIR_ENV, "").split(os.pathsep)):
        path = Path(folder)
        if not path.is_dir():
            raise CatalogError(path, "<folder>", f"${DEVICE_DIR_ENV} names it and it is not a folder")
        found = sorted(path.glob("*.toml"))
        if not found:
            raise CatalogError(path, "<folder>", f"${DEVICE_DIR_ENV} names it and it holds no *.toml data file")
        files += found
    return files


def with_extra_devices(specs: dict[str, DeviceSpec], paths: Sequence[Path]) -> dict[str, DeviceSpec]:
    """``specs`` (the packaged catalog) and the device of each extra data file, checked as a catalog file is; a
    name that the catalog or an earlier extra file has is refused (an extra file adds a device, never changes
    one: copy the file and rename the device)."""
    out, defined_by = dict(specs), {}
    for path in paths:
        spec = load_device_file(path)
        clash = same_name(spec.name, out)
        if clash is not None:
            where = defined_by.get(clash, f"polyrec's catalog ({DEVICES_DIR})")
            raise CatalogError(path, "name", f"'{spec.name}' is already a device of {where}; an extra data file "
                                             "adds a new device: give it another name")
        out[spec.name], defined_by[spec.name] = spec, str(path)
    return out


@functools.cache
def catalog() -> dict[str, DeviceSpec]:
    """The packaged catalog with the extra data files (``$POLYREC_DEVICE_DIR``'s, ``device_files``'), loaded once."""
    return with_extra_devices(load_catalog(), [*env_device_files(), *_added_files])


@contextlib.contextmanager
def device_files(paths: Sequence[Path]) -> Iterator[None]:
    """The catalog with these data files added while the block runs (``--device-file``), each checked on entry
    (CatalogError naming the file and field, or a name the catalog has); as it was after."""
    global _added_files
    if not paths:
        yield
        return
    before = _added_files
    _added_files = (*before, *map(Path, paths))
    catalog.cache_clear()
    try:
        catalog()
        yield
    finally:
        _added_files = before
        catalog.cache_clear()


def get_device(name: str) -> DeviceSpec:
    """Look a device up by name, case-insensitively; unknown names list the valid ones."""
    specs = catalog()
    key = same_name(name, specs)
    if key is None:
        raise UnknownDeviceError(name, sorted(specs))
    return specs[key]
