"""The hardware catalog: packaged data files load, values match datasheets, bad files are named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polyrec.hardware.catalog import DEVICES_DIR, CatalogError, UnknownDeviceError, catalog, get_device, load_catalog
from polyrec.hardware.types import PEAK_DTYPES

REQUIRED = ("H100", "H200", "B200", "A100", "MI300X", "MI325X", "MI350X", "MI355X")


def test_catalog_has_required_devices():
    assert set(REQUIRED) <= set(catalog())


@pytest.mark.parametrize(
    "name, hbm_gb, tbps",
    [("H200", 141, 4.8), ("MI350X", 288, 8.0), ("B200", 180, 8.0), ("MI300X", 192, 5.3), ("H100", 80, 3.35)],
)
def test_headline_numbers_match_datasheets(name, hbm_gb, tbps):
    spec = get_device(name)
    assert spec.hbm_bytes == pytest.approx(hbm_gb * 1e9, rel=0.01)
    assert spec.hbm_bandwidth == pytest.approx(tbps * 1e12, rel=0.01)


def test_every_number_has_a_source():
    for spec in catalog().values():
        for key in ("compute_units", "hbm_bytes", "hbm_bandwidth", "smem_per_block", "tdp_watts"):
            assert spec.source_of(key).startswith(("http", "torch", "not applicable")), (spec.name, key)
        for dtype in PEAK_DTYPES:
            assert spec.source_of(f"peak_flops.{dtype}") != "unknown", (spec.name, dtype)


def test_amd_and_nvidia_targets():
    for spec in catalog().values():
        if spec.vendor == "amd":
            assert spec.triton.backend == "hip" and spec.warp_size == 64
            assert spec.arch in ("gfx942", "gfx950") and spec.triton.arch == spec.arch
        else:
            assert spec.triton.backend == "cuda" and spec.warp_size == 32
    assert get_device("MI300X").smem_per_block == 64 * 1024
    assert get_device("MI350X").smem_per_block == 160 * 1024


def test_lookup_is_case_insensitive_and_unknown_lists_valid():
    assert get_device("mi350x").name == "MI350X"
    with pytest.raises(UnknownDeviceError) as info:
        get_device("H300")
    assert "H300" in str(info.value) and "H200" in str(info.value) and "MI355X" in str(info.value)


@pytest.fixture
def scratch_catalog(tmp_path) -> Path:
    shutil.copy(DEVICES_DIR / "h200.toml", tmp_path / "h200.toml")
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "old, new, field",
    [
        ('[hbm_bandwidth]\nvalue = 4.8e12\nunit = "B/s"', '[hbm_bandwidth]\nvalue = 4.8e12\nunit = "GB/s"', "hbm_bandwidth"),
        ('[compute_units]\nvalue = 132', '[compute_units]\nvalue = "many"', "compute_units"),
        ('[compute_units]\nvalue = 132', '[compute_units]\nvalue = 132.5', "compute_units"),
        ('[tdp_watts]\nvalue = 700\nunit = "W"\nsource = "datasheet"', '[tdp_watts]\nvalue = 700\nunit = "W"', "tdp_watts"),
        ('vendor = "nvidia"', 'vendor = "intel"', "vendor"),
        ('backend = "cuda"', 'backend = "hip"', "triton.backend"),
        ('[peak_flops.fp8]', '[peak_flops.fp4]', "peak_flops.fp8"),
        ('[l2_bytes]', '[l2_size]', "l2_bytes"),
        ('[hbm_bandwidth]\nvalue = 4.8e12', '[hbm_bandwidth]\nvalue = nan', "hbm_bandwidth"),  # was accepted
        ('[hbm_bandwidth]\nvalue = 4.8e12', '[hbm_bandwidth]\nvalue = inf', "hbm_bandwidth"),
        ('[hbm_bandwidth]\nvalue = 4.8e12', '[hbm_bandwidth]\nvalue = 0', "hbm_bandwidth"),  # the planner divided by it
        ('[compute_units]\nvalue = 132', '[compute_units]\nvalue = inf', "compute_units"),  # was an OverflowError
        # misspelt optional fields were ignored: a device never detected, an Infinity Cache of 0
        ('match_names = ["H200"]', 'match_name = ["H200"]', "match_name"),
        ('[l2_bytes]', '[infinity_cache]\nvalue = 1\nunit = "bytes"\nsource = "x"\n\n[l2_bytes]', "infinity_cache"),
    ],
)
def test_malformed_file_names_file_and_field(scratch_catalog, old, new, field):
    path = scratch_catalog / "h200.toml"
    _edit(path, old, new)
    with pytest.raises(CatalogError) as info:
        load_catalog(scratch_catalog)
    assert info.value.field_name == field
    assert str(path) in str(info.value) and field in str(info.value)


def test_invalid_toml_and_duplicate_names(scratch_catalog):
    shutil.copy(scratch_catalog / "h200.toml", scratch_catalog / "h200-copy.toml")
    with pytest.raises(CatalogError, match="already defined"):
        load_catalog(scratch_catalog)
    (scratch_catalog / "h200-copy.toml").write_text("name = [unclosed")
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_catalog(scratch_catalog)


def test_a_file_that_is_not_utf8_names_the_file(scratch_catalog):
    """Was a bare UnicodeDecodeError naming neither the file nor that it is a data file."""
    (scratch_catalog / "h200-copy.toml").write_bytes(b"name = \"\xff\"\n")
    with pytest.raises(CatalogError, match="h200-copy.toml.*not valid TOML"):
        load_catalog(scratch_catalog)


def test_a_whole_float_warp_size_is_taken_as_an_integer(scratch_catalog):
    """TOML's ``warp_size = 32.0`` passed the check and reached Triton's launch options as a float."""
    _edit(scratch_catalog / "h200.toml", "warp_size = 32", "warp_size = 32.0")
    spec = load_catalog(scratch_catalog)["H200"]
    assert type(spec.triton.warp_size) is int and spec.triton.warp_size == 32


def test_a_card_without_a_scaleup_link_says_zero(scratch_catalog):
    """types.py and the planner take scaleup_bandwidth = 0 as "no NVLink / Infinity Fabric" (collectives over
    PCIe); the loader refused the 0, so a PCIe-only card could not be added."""
    _edit(scratch_catalog / "h200.toml", '[scaleup_bandwidth]\nvalue = 450e9', '[scaleup_bandwidth]\nvalue = 0')
    assert load_catalog(scratch_catalog)["H200"].scaleup_bandwidth == 0
