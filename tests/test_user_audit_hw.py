"""A first-time user's audit of `polyrec hw` and polyrec/hardware: device files with odd text in them, device
names that are not names, compile jobs whose signature does not name the kernel's arguments."""

from __future__ import annotations

import re
import sys

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware.catalog import CatalogError, load_device_file
from compile_util import compile_only
from device_files_util import h200_copy

runner = CliRunner()


def test_show_prints_text_of_a_device_file_as_written(tmp_path, fresh_catalog):
    """Square brackets in a product name or a source were read as rich markup: `hw show --device-file` was a
    MarkupError traceback, exit 1."""
    path = h200_copy(tmp_path, "H200NVL", [('full_name = "NVIDIA H200 SXM 141GB"', 'full_name = "H200 [/] NVL"'),
                        ('datasheet = "https://www.nvidia.com/en-us/data-center/h200/"', 'datasheet = "[/link]"')])
    result = runner.invoke(app, ["hw", "show", "H200NVL", "--device-file", str(path)])
    assert result.exit_code == 0, result.output
    assert "H200 [/] NVL" in result.stdout and "[/link]" in result.stdout


def test_list_prints_the_arch_as_written(tmp_path, fresh_catalog):
    """An arch of "[i]x" was printed as an italic "x" by `hw list`."""
    folder = tmp_path / "devices"
    folder.mkdir()
    h200_copy(folder, "H200NVL", [('arch = "sm_90"', 'arch = "[i]x"')])
    fresh_catalog.setenv("POLYREC_DEVICE_DIR", str(folder))
    result = runner.invoke(app, ["hw", "list"])
    assert result.exit_code == 0, result.output
    assert "[i]x" in result.stdout


@pytest.mark.parametrize("name", ["../../evil", "H200 NVL", "a/b", " H200X", "-x", "..", "H200,x"])
def test_a_device_name_that_is_no_name_is_refused(tmp_path, name):
    """Any string was a name: "../../evil" stored its calibration outside the cache (calibration_path), and a
    name with a space, ',' or '/' could never be written in `polyrec plan --fleet NAMExCOUNT`."""
    with pytest.raises(CatalogError, match="field 'name'"):
        load_device_file(h200_copy(tmp_path, name))


@pytest.mark.parametrize("name", ["H200NVL", "h200_nvl", "GH200-480GB", "MI300X.v2"])
def test_a_device_name_of_letters_digits_and_separators_is_taken(tmp_path, name):
    assert load_device_file(h200_copy(tmp_path, name)).name == name


@compile_only
@pytest.mark.parametrize("signature", [
    {"x": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},  # a misspelt argument
    {"y_ptr": "*fp32", "x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},  # two swapped
    {"x_ptr": "*fp32", "y_ptr": "*fp32", "BLOCK": "constexpr"},  # one left out
])
def test_a_signature_that_does_not_name_the_kernels_arguments_is_refused(signature):
    """Triton reads a signature's types by position and, for a CUDA target, never looks at the names: a job
    naming arguments the kernel lacks, or naming them in another order, compiled (another kernel than meant)
    and was reported to fit."""
    from triton_kernels import scale_kernel

    from polyrec.hardware import get_device
    from polyrec.hardware.compile import CompileHarnessError, CompileJob, compile_job

    job = CompileJob(label="scale", kernel=scale_kernel, signature=signature, constexprs={"BLOCK": 256})
    with pytest.raises(CompileHarnessError, match=r"scale: signature names .* scale_kernel takes"):
        compile_job(job, get_device("H200"))


def test_a_kernel_that_gives_no_compile_job_is_refused(tmp_path, monkeypatch):
    """A --kernel returning [] printed an empty table and exited 0: nothing compiled, nothing wrong said."""
    (tmp_path / "no_jobs.py").write_text("def compile_jobs(spec):\n    return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, ["hw", "compile-check", "-k", "no_jobs:compile_jobs", "-d", "H200"])
    assert result.exit_code == 2, result.output
    assert "--kernel no_jobs:compile_jobs: no compile job for H200: nothing to check" in " ".join(result.stderr.split())


def test_a_kernel_module_in_the_current_folder_says_how_to_import_it(tmp_path, monkeypatch):
    """The installed polyrec command does not import from the current folder (python -m does): the error said
    only "No module named 'mine'" where the file was right there."""
    (tmp_path / "mine.py").write_text("def compile_jobs(spec):\n    return []\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    result = runner.invoke(app, ["hw", "compile-check", "-k", "mine:compile_jobs", "-d", "H200"])
    assert result.exit_code == 2, result.output
    assert "mine is in the current folder, which the polyrec command does not import from: run PYTHONPATH=." in (
        " ".join(result.stderr.split()))


@pytest.mark.parametrize("name, count_of", [("H200x8", "8 of device 'H200'"), ("GB200X2", "2 of device 'GB200'")])
def test_a_device_name_that_fleet_reads_as_a_count_is_refused(tmp_path, name, count_of):
    """`--fleet H200x8` is 8 H200s (KINDxCOUNT): a device named H200x8 could never be named in a fleet, and once
    its data file was loaded a fleet string meant one thing or another depending on the files loaded."""
    with pytest.raises(CatalogError, match=rf"field 'name': '{name}' ends in .* reads as {re.escape(count_of)}"):
        load_device_file(h200_copy(tmp_path, name))


@pytest.mark.parametrize("name", ["H200x8", "GB200X2"])
def test_the_name_a_refusal_suggests_is_taken_and_one_device_in_a_fleet(tmp_path, fresh_catalog, name):
    from polyrec.hardware.catalog import device_files, fleet_safe
    from polyrec.planner import parse_fleet

    suggested = fleet_safe(name)
    path = h200_copy(tmp_path, suggested)
    with pytest.raises(CatalogError, match=re.escape(f"e.g. '{suggested}'")):
        load_device_file(h200_copy(tmp_path, name))
    with device_files([path]):
        fleet = parse_fleet(suggested)
    assert [(g.device, g.count) for g in fleet.groups] == [(suggested, 1)]


@pytest.mark.parametrize("name", ["H200NVL", "MI400X", "x8", "H200x8-SXM", "B200x_8", "RTX-4090", "Ax-1"])
def test_names_fleet_reads_as_one_device_are_taken(tmp_path, fresh_catalog, name):
    """RTX-4090 alone was read as -4090 of device 'RT' (a whole entry naming a device is now that device)."""
    from polyrec.hardware.catalog import device_files
    from polyrec.planner import parse_fleet

    path = h200_copy(tmp_path, name)
    assert load_device_file(path).name == name
    with device_files([path]):
        assert [(g.device, g.count) for g in parse_fleet(f"{name}x4").groups] == [(name, 4)]
        assert [(g.device, g.count) for g in parse_fleet(name).groups] == [(name, 1)]


@pytest.mark.parametrize("reported", ["NVIDIA Fancy GPU 9000", "../../etc/passwd", "a/b\\c d", " ..", "", "ÄÖ GPU",
                                      "NVIDIA GeForce RTX 4090", "Card x8"])
def test_an_unknown_gpus_fallback_name_is_a_device_name(reported):
    """The name of a GPU the catalog lacks was torch's with spaces made '-': "../../etc/passwd" stayed as it was
    (a calibration stored outside the cache), "a/b" kept its '/'."""
    from polyrec.hardware.catalog import DEVICE_NAME, device_name_problem
    from polyrec.hardware.detect import DeviceProps, detect_from

    found = detect_from(DeviceProps(name=reported, total_memory=24 * 2**30, multi_processor_count=7, major=8))
    assert found.how == "properties" and found.spec.full_name == reported
    name = found.spec.name
    assert DEVICE_NAME.fullmatch(name) and device_name_problem(name) is None and "/" not in name, name
