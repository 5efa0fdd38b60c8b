"""Fifty-seventh session's audit of `--fleet` and device names: a device file's name in another case, and a
fleet entry that glues a device kind ending in a letter to its count."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.planner.types import FleetError
from device_files_util import h200_copy

runner = CliRunner()


@pytest.mark.parametrize("name, written", [("RTX-4090", "rtx-4090"), ("Ax-1", "AX-1"), ("Ax-1", " ax-1 ")])
def test_a_device_name_in_another_case_is_that_device(tmp_path, fresh_catalog, name, written):
    """Device names are case-insensitive (`--fleet h200x8` is 8 H200s), but a whole entry naming a device was
    matched case-sensitively: `--fleet rtx-4090` was "unknown device 'rt'" where `--fleet RTX-4090` was the device."""
    from polyrec.hardware.catalog import device_files
    from polyrec.planner import parse_fleet

    with device_files([h200_copy(tmp_path, name)]):
        assert [(g.device, g.count) for g in parse_fleet(f"{written},H200x2").groups] == [(name, 1), ("H200", 2)]


@pytest.mark.parametrize("fleet, meant", [("MI300X8", "MI300Xx8"), ("mi300x8@2", "MI300Xx8"),
                                          ("H100x2,MI355X4", "MI355Xx4")])
def test_a_count_glued_to_a_kind_ending_in_x_names_the_fleet_meant(fleet, meant):
    """`--fleet MI300X8` was "unknown device 'MI300'" and no more: the 'X' of MI300X read as the count's."""
    from polyrec.planner import parse_fleet

    with pytest.raises(FleetError, match=rf"did you mean {meant} \(KINDxCOUNT\)\? Valid devices: A100"):
        parse_fleet(fleet)


@pytest.mark.parametrize("fleet, meant", [("mi350x:8", "MI350Xx8"), ("H200 8", "H200x8"), ("MI300X/8@2", "MI300Xx8"),
                                          ("H100x2,B200_4", "B200x4"), ("h100-2", "H100x2"), ("H200=16", "H200x16")])
def test_a_count_after_another_separator_than_x_names_the_fleet_meant(fleet, meant):
    """`--fleet mi350x:8` said "unknown device 'mi350x:8'" and listed the devices, not that the count goes after an
    'x' (seventy-ninth session)."""
    from polyrec.planner import parse_fleet

    with pytest.raises(FleetError, match=rf"did you mean {meant} \(KINDxCOUNT\)\? Valid devices: A100"):
        parse_fleet(fleet)


@pytest.mark.parametrize("fleet", ["H2008", "H200:0", "H200:x", "H200:８"])
def test_an_entry_that_is_no_kind_and_count_gets_no_guess(fleet):
    """A count glued to a kind not ending in 'x' may be a device of its own name; a count of 0 or none, or in other
    digits than ASCII, is no fleet: those get the list of devices, with no entry guessed."""
    from polyrec.planner import parse_fleet

    with pytest.raises(FleetError, match=r"'; valid devices: A100") as raised:
        parse_fleet(fleet)
    assert "did you mean" not in str(raised.value)


@pytest.mark.parametrize("fleet", ["cpu", "CPUx2", "H200x2,cpu"])
def test_a_cpu_fleet_says_what_cpu_is(fleet):
    """`polyrec hw detect` names the host `cpu` where torch sees no GPU; `plan --fleet cpu` said only "unknown device
    'cpu'", not that the planner plans GPUs and where a CPU run goes (sixtieth session)."""
    from polyrec.planner import parse_fleet

    with pytest.raises(FleetError, match=r"cpu is the host CPU \(polyrec train --device cpu runs there\), which the "
                                         r"planner does not plan: it plans the catalog's GPUs\. Valid devices: A100"):
        parse_fleet(fleet)


def test_compare_given_a_fleet_says_it_takes_device_kinds():
    """`plan --compare H200x8,H100` said "unknown device 'H200x8'" without saying that --compare names kinds."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200x8,H100"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--compare names device kinds, not fleets: 'H200x8' is a fleet of 8 H200; give H200" in said, said


@pytest.mark.parametrize("reported", ["H100", "h200", "MI300X"])
def test_an_unknown_gpu_reported_by_a_catalog_name_is_not_named_as_that_device(reported):
    """A GPU the catalog lacks whose driver reports a catalog device's name (its memory or SM count differ from
    that device's) took the name: `polyrec hw calibrate` on it wrote the catalog device's calibration file
    (calibration_path lowers the name), which every plan for that device then used."""
    from polyrec.hardware.calibrate import calibration_path
    from polyrec.hardware.catalog import catalog, device_name_problem
    from polyrec.hardware.detect import DeviceProps, detect_from

    found = detect_from(DeviceProps(name=reported, total_memory=24 * 2**30, multi_processor_count=7, major=8))
    name = found.spec.name
    assert found.how == "properties" and device_name_problem(name) is None
    assert name.lower() not in {known.lower() for known in catalog()}, name
    assert calibration_path(name) != calibration_path(reported) and name == f"{reported}-unmatched"
