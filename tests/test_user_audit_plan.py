"""A user's audit of `polyrec plan` and `polyrec hw` on the CPU: what a data file or a calibration file may
say that the planner cannot price is refused with the field named, not planned at infinity or a traceback."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.hardware import get_device
from polyrec.hardware.calibrate import ceilings, save_calibration
from polyrec.hardware.catalog import CatalogError, load_device_file
from device_files_util import h200_copy

runner = CliRunner()


@pytest.fixture
def catalog_without_bf16(tmp_path, monkeypatch):
    """The packaged catalog plus one data file, NOBF16: an H200 whose datasheet has no bf16 rate, written as
    docs/hardware.md says (value = 0 where the dtype is unsupported; a V100 has no bf16)."""
    catalog_module = sys.modules["polyrec.hardware.catalog"]  # polyrec.hardware.catalog is also a function's name
    for path in catalog_module.DEVICES_DIR.glob("*.toml"):
        shutil.copy(path, tmp_path)
    text = (tmp_path / "h200.toml").read_text()
    text = text.replace('name = "H200"', 'name = "NOBF16"', 1).replace('["H200"]', '["NOBF16"]', 1)
    (tmp_path / "nobf16.toml").write_text(text.replace("[peak_flops.bf16]\nvalue = 989.4e12",
                                                       "[peak_flops.bf16]\nvalue = 0", 1))
    real_load = catalog_module.load_catalog
    monkeypatch.setattr(catalog_module, "load_catalog", lambda: real_load(tmp_path))
    catalog_module.catalog.cache_clear()
    yield
    catalog_module.catalog.cache_clear()


@pytest.mark.usefixtures("catalog_without_bf16")
def test_a_dense_dtype_the_device_has_no_matrix_rate_for_is_refused():
    """Was a plan of an infinite step at 0 samples/s (exit 0, "Infinity" in the JSON, which `polyrec train
    --plan` then refused): every GEMM priced at a rate of 0. fp8 was refused so on the A100 already."""
    assert get_device("NOBF16").peak_flops["bf16"] == 0
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "NOBF16x1", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "dense dtype bf16: NOBF16 has no bf16 matrix rate" in " ".join(result.output.split())
    fp32 = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "NOBF16x1", "--dense-dtype", "fp32",
                               "--json"])
    assert fp32.exit_code == 0, fp32.output
    assert json.loads(fp32.stdout)["samples_per_s"] > 0


@pytest.mark.parametrize("key, value", [("l2_bandwidth", 1e-300), ("l2_bandwidth", 1e300),
                                        ("launch_latency", 1e300), ("launch_latency", 1e-300)])
def test_an_estimated_ceiling_no_device_measures_is_refused_naming_it(key, value):
    """The datasheet rates had a plausible band, the estimated ones (L2 bandwidth, launch latency) none: an
    L2 of 1e-300 B/s crashed `polyrec plan` with a traceback (RuntimeError: select_gemm: no config ... fits),
    a launch latency of 1e300 s planned a step of 1e304 ms."""
    save_calibration("H200", {"date": "2026-12-05", key: value})
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "H200x1", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    said = " ".join(result.output.split())
    assert f"calibration of H200: '{key}'" in said and "the estimate's" in said


def test_measured_estimated_ceilings_still_load():
    """What an H200 measured (L2 7.7-8.5 TB/s against the 12 TB/s estimate, launches 6-11 us against 5 us)."""
    c = ceilings(get_device("H200"), {"date": "2026-12-05", "l2_bandwidth": 7.7e12, "launch_latency": 1.14e-5})
    assert c.l2_bandwidth.value == 7.7e12 and c.launch_latency.value == 1.14e-5


def _said(result) -> str:
    """The CLI's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def test_every_plan_answer_carries_fits(tmp_path):
    """A plan's --json had no "fits" where a no-fit answer has "fits": false: d["fits"] was a KeyError on
    success. --compare rows and --codesign designs carry it too."""
    plan = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--json"])
    assert plan.exit_code == 0 and json.loads(plan.stdout)["fits"] is True, plan.output
    compare = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--compare", "H200", "--json", "--out-dir",
                                  str(tmp_path)])
    assert compare.exit_code == 0, compare.output
    assert [row["fits"] for row in json.loads(compare.stdout)["rows"]] == [True]
    design = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--target-samples-per-s", "1e6",
                                 "--json"])
    assert design.exit_code == 0 and [d["fits"] for d in json.loads(design.stdout)] == [True], design.output


def test_a_kind_that_fits_no_fleet_is_a_row_that_does_not_fit():
    from polyrec.planner.report import WhatIfRow

    row = WhatIfRow(device="H100", fleet=None, gpus=None, samples_per_s=None, samples_per_s_per_gpu=None,
                    samples_per_s_per_watt=None, step_ms=None, peak_gb_per_gpu=None, batch_per_gpu=None,
                    notes="fits no H100 fleet", origin=None)
    assert row.fits is False


def test_a_plan_json_says_fits_and_still_loads():
    from polyrec.planner import Plan, PlanFormatError, make_plan, model_spec_from_config, parse_fleet
    from polyrec.models.config import dcnv2_small

    plan = make_plan(model_spec_from_config(dcnv2_small()), parse_fleet("H200x1"))
    doc = json.loads(plan.to_json())
    assert doc["fits"] is True and Plan.from_json(plan.to_json()) == plan
    doc["fits"] = "yes"
    with pytest.raises(PlanFormatError, match="plan.fits: expected true or false"):
        Plan.from_json(json.dumps(doc))
    doc["fits"] = True
    doc["memory"][0]["capacity"] = 1  # a hand edit that contradicts "fits"
    with pytest.raises(PlanFormatError, match=r"plan.fits: plan.memory\[0\] needs"):
        Plan.from_json(json.dumps(doc))


def test_codesign_without_a_design_exits_1_as_a_plan_that_does_not_fit():
    """Was exit 0 where "even the smallest design misses the target or does not fit"."""
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--codesign", "--target-samples-per-s", "1e12",
                                 "--compare", "H200,H100", "--json"])
    assert result.exit_code == 1, result.output
    assert [d["fits"] for d in json.loads(result.stdout)] == [False, False]
    assert "no design: H200x1: even the smallest design misses the target" in " ".join(result.stderr.split())


@pytest.mark.parametrize("fleet", ["H200x1", "H100x2", "MI300Xx1"])
def test_a_larger_max_batch_never_plans_fewer_samples_per_s(fleet):
    """MLPerf on an H200: --max-batch-per-gpu 400000 planned 4.26M samples/s, 1000000 or 1e7 4.24M (the planner
    tried its fixed batches and the max, never the largest batch that fits below a max that does not)."""
    from polyrec.models.config import mlperf_dcnv2
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    model = model_spec_from_config(mlperf_dcnv2())
    rates = [make_plan(model, parse_fleet(fleet), PlanConstraints(max_batch_per_gpu=m)).samples_per_s
             for m in (65536, 262144, 400000, 1_000_000, 10_000_000)]
    assert rates == sorted(rates), rates


def test_the_bisected_batch_is_aligned():
    """The largest batch below an unfitting max is a multiple of 16: at 418,447 (odd) the GEMMs run unaligned,
    3.94M samples/s against 4.28M at 418,432."""
    from polyrec.models.config import mlperf_dcnv2
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    plan = make_plan(model_spec_from_config(mlperf_dcnv2()), parse_fleet("H200x1"),
                     PlanConstraints(max_batch_per_gpu=1_000_000))
    assert plan.batch_per_gpu % 16 == 0 and 400_000 < plan.batch_per_gpu < 1_000_000


@pytest.mark.usefixtures("fresh_catalog")
def test_a_device_file_plans_a_device_the_catalog_lacks(tmp_path):
    """There was no way to plan for a device not in the package's catalog without editing the package."""
    path = h200_copy(tmp_path, "H200NVL")
    show = runner.invoke(app, ["hw", "show", "H200NVL", "--device-file", str(path), "--json"])
    assert show.exit_code == 0 and json.loads(show.stdout)["name"] == "H200NVL", show.output
    plan = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "H200NVLx2", "--device-file", str(path),
                               "--json"])
    assert plan.exit_code == 0 and json.loads(plan.stdout)["fleet"]["groups"][0]["device"] == "H200NVL", plan.output
    without = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--fleet", "H200NVLx2"])  # only while given
    assert without.exit_code == 2 and "unknown device 'H200NVL'" in _said(without)


@pytest.mark.usefixtures("fresh_catalog")
def test_a_device_folder_in_the_environment_adds_its_devices(tmp_path, monkeypatch):
    h200_copy(tmp_path, "H200NVL")
    monkeypatch.setenv("POLYREC_DEVICE_DIR", str(tmp_path))
    assert get_device("h200nvl").name == "H200NVL" and get_device("H200").name == "H200"
    monkeypatch.setenv("POLYREC_DEVICE_DIR", str(tmp_path / "missing"))
    sys.modules["polyrec.hardware.catalog"].catalog.cache_clear()
    result = runner.invoke(app, ["hw", "list"])
    assert result.exit_code == 2 and "POLYREC_DEVICE_DIR names it and it is not a folder" in _said(result)


@pytest.mark.usefixtures("fresh_catalog")
@pytest.mark.parametrize("name, said", [("H200", "'H200' is already a device of polyrec's catalog"),
                                        ("h100", "'h100' is already a device of polyrec's catalog")])
def test_an_extra_device_named_as_a_catalog_device_is_refused(tmp_path, name, said):
    path = h200_copy(tmp_path, name)
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--device-file", str(path)])
    assert result.exit_code == 2 and said in _said(result) and f"{path}: field 'name'" in _said(result)


@pytest.mark.usefixtures("fresh_catalog")
def test_an_extra_device_file_is_checked_as_the_catalog_files_are(tmp_path):
    path = h200_copy(tmp_path, "H200NVL", edits=[('[hbm_bandwidth]\nvalue = 4.8e12\nunit = "B/s"',
                                           '[hbm_bandwidth]\nvalue = 4.8e12\nunit = "TB/s"')])
    for args in (["hw", "show", "H200NVL"], ["plan", "--model", "dcnv2-small", "--fleet", "H200NVL"]):
        result = runner.invoke(app, [*args, "--device-file", str(path)])
        assert result.exit_code == 2 and f"{path}: field 'hbm_bandwidth'" in _said(result), result.output
    missing = runner.invoke(app, ["hw", "show", "H200", "--device-file", str(tmp_path / "none.toml")])
    assert missing.exit_code == 2 and "none.toml: field '<file>': cannot be read" in _said(missing)


@pytest.mark.usefixtures("fresh_catalog")
@pytest.mark.parametrize("edits, field", [
    ([("[hbm_bandwidth]\nvalue = 4.8e12", "[hbm_bandwidth]\nvalue = 1e-300")], "hbm_bandwidth"),  # a traceback
    ([("[smem_per_block]\nvalue = 232448", "[smem_per_block]\nvalue = 300000")], "smem_per_block"),  # > per SM
    ([("[hbm_bytes]\nvalue = 141e9", "[hbm_bytes]\nvalue = 1")], "hbm_bytes"),  # "-1.0 GB usable"
    ([("[warp_size]\nvalue = 32", "[warp_size]\nvalue = 64"), ("warp_size = 32", "warp_size = 64")],
     "triton.warp_size"),  # a CUDA warp is 32 threads
    ([("[peak_flops.bf16]\nvalue = 989.4e12", "[peak_flops.bf16]\nvalue = 1e300")], "peak_flops.bf16"),
])
def test_absurd_data_file_values_are_refused_naming_file_and_field(tmp_path, edits, field):
    """Each was accepted: a traceback in `polyrec plan` (hbm_bandwidth 1e-300), or a plan of a device that cannot
    be (shared memory per block above the SM's, a CUDA warp of 64, 1 byte of HBM: "-1.0 GB usable")."""
    path = h200_copy(tmp_path, "H200NVL", edits=edits)
    with pytest.raises(CatalogError) as info:
        load_device_file(path)
    assert info.value.field_name == field and str(path) in str(info.value)
    result = runner.invoke(app, ["plan", "--model", "mlperf-dcnv2", "--fleet", "H200NVL", "--device-file", str(path)])
    assert result.exit_code == 2 and f"{path}: field '{field}'" in _said(result), result.output


@pytest.mark.parametrize("dtype", ["fp16", "tf32"])
@pytest.mark.parametrize("mode", [["-o", "{tmp}/plan.json"], ["--compare", "H200", "--out-dir", "{tmp}"],
                                  ["--codesign", "--target-samples-per-s", "1e6"]])
def test_a_dense_dtype_the_trainer_does_not_run_is_refused_by_plan(tmp_path, dtype, mode):
    """`polyrec plan --dense-dtype fp16` (or tf32) wrote a plan, exit 0, that `polyrec train --plan` then refused
    ("dense dtype 'fp16' is not one the trainer runs"): the trainer has no fp16 loss scaling nor TF32 setting."""
    args = [a.format(tmp=tmp_path) for a in mode]
    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--dense-dtype", dtype, *args, "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert f"--dense-dtype {dtype}: polyrec train runs dense layers in bf16, fp32 or fp8" in _said(result)
    assert list(tmp_path.iterdir()) == []


def test_every_dense_dtype_plan_takes_is_one_train_runs(tmp_path):
    """The planner's list of trainable dense dtypes is the trainer's --precision less "auto", and each plans and
    applies (the guard that keeps the two lists one)."""
    from polyrec.planner import Plan
    from polyrec.planner.types import TRAINABLE_DENSE_DTYPES
    from polyrec.runtime.config import PRECISIONS, TrainConfig
    from polyrec.runtime.plan_apply import apply_plan

    assert set(TRAINABLE_DENSE_DTYPES) == set(PRECISIONS) - {"auto"}
    for dtype in TRAINABLE_DENSE_DTYPES:
        path = tmp_path / f"{dtype}.json"
        result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--dense-dtype", dtype, "-o", str(path)])
        assert result.exit_code == 0, result.output
        assert apply_plan(TrainConfig(plan=path), Plan.from_json(path.read_text())).precision == dtype


def _small_plan(tmp_path, config, name="plan.json"):
    """A plan of ``config`` one CPU step can run (batch 16, fp32 dense), written to ``tmp_path / name``."""
    from polyrec.planner import PlanConstraints, make_plan, model_spec_from_config, parse_fleet

    plan = make_plan(model_spec_from_config(config), parse_fleet("H200x1"),
                     PlanConstraints(batch_per_gpu=16, dense_dtype="fp32"))
    path = tmp_path / name
    path.write_text(plan.to_json())
    return path


def test_train_takes_the_preset_of_the_plan(tmp_path):
    """`polyrec plan --model M -o plan.json; polyrec train --plan plan.json` trained the default preset: refused as
    "plan's model is not this run's model 'dcnv2-small'" with every size listed, never naming --preset M."""
    from polyrec.models.config import dlrm_criteo_kaggle

    path = _small_plan(tmp_path, dlrm_criteo_kaggle().with_capped_rows(64))
    result = runner.invoke(app, ["train", "--plan", str(path), "--row-cap", "64", "--steps", "1", "--device", "cpu",
                                 "--cpu-threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    start = next(json.loads(line) for line in result.stdout.splitlines() if '"event": "start"' in line)
    assert (start["config"]["preset"], start["config"]["batch_size"]) == ("dlrm-criteo-kaggle", 16)
    clash = runner.invoke(app, ["train", "--plan", str(path), "--preset", "mlperf-dcnv2", "--row-cap", "64",
                                "--steps", "1", "--device", "cpu"])
    assert clash.exit_code == 2
    assert "the run sets preset 'mlperf-dcnv2' (the plan: 'dlrm-criteo-kaggle', from its model.name)" in (
        " ".join(clash.stderr.split()))


@pytest.mark.parametrize("typed,clash", [
    (["--preset", "dcnv2-small"], "preset 'dcnv2-small' (the plan: 'dlrm-criteo-kaggle', from its model.name)"),
    (["--batch-size", "512"], "batch_size 512 (the plan: 16)"),
    (["--embedding-optimizer", "rowwise_adagrad", "--dense-optimizer", "adagrad", "--precision", "auto"],
     "precision 'auto' (the plan: 'fp32')"),
])
def test_an_option_typed_at_its_default_against_the_plan_is_refused(tmp_path, typed, clash):
    """An option typed with its default value (`--preset dcnv2-small`) counted as left out: the plan's value won in
    silence, and the run trained another preset (or batch, or precision) than the one typed."""
    from polyrec.models.config import dlrm_criteo_kaggle

    path = _small_plan(tmp_path, dlrm_criteo_kaggle().with_capped_rows(64))
    result = runner.invoke(app, ["train", "--plan", str(path), *typed, "--row-cap", "64", "--steps", "1", "--device",
                                 "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 2, result.output
    assert f"the run sets {clash}" in " ".join(result.stderr.split()), result.stderr


def test_an_option_typed_with_the_plans_value_is_taken(tmp_path):
    from polyrec.models.config import dlrm_criteo_kaggle

    path = _small_plan(tmp_path, dlrm_criteo_kaggle().with_capped_rows(64))
    result = runner.invoke(app, ["train", "--plan", str(path), "--preset", "dlrm-criteo-kaggle", "--batch-size", "16",
                                 "--row-cap", "64", "--steps", "1", "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output


def test_a_plan_for_other_lookups_per_sample_warns_that_its_prediction_is_not_this_runs(tmp_path):
    """A plan priced for one-hot features (1 lookup per sample) loaded for dcnv2-small (up to 4 per feature) in
    silence: `_model_differences` compared rows, dims and the dense half, not the tables' pooling. The lookups are
    compared once the data has shaped the model (file data is one-hot): synthetic data warns."""
    from polyrec.models.config import dcnv2_small

    config = dcnv2_small().with_capped_rows(64)
    path = _small_plan(tmp_path, config.replace(multi_hot=(1,) * config.num_tables))
    result = runner.invoke(app, ["train", "--plan", str(path), "--row-cap", "64", "--steps", "1", "--device", "cpu",
                                 "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output
    assert ("lookups per sample of table 0 (the first that differs): the plan's 1, the run's 3): its choices are taken"
            in " ".join(result.stderr.split())), result.stderr


def test_plan_one_hot_prices_one_lookup_per_feature_and_fits_file_data(tmp_path):
    """`polyrec plan` priced the preset's multi-hot lookups only, so a run on Criteo or MLPerf files (one-hot) under
    any plan was warned that the plan's step time and memory were not its own. `--one-hot` plans that model."""
    import warnings

    from polyrec.models.config import dcnv2_small

    result = runner.invoke(app, ["plan", "--model", "dcnv2-small", "--one-hot", "--json"])
    assert result.exit_code == 0, result.output
    multi = json.loads(runner.invoke(app, ["plan", "--model", "dcnv2-small", "--json"]).stdout)
    assert {t["pooling"] for t in json.loads(result.stdout)["model"]["tables"]} == {1}
    assert max(t["pooling"] for t in multi["model"]["tables"]) > 1
    config = dcnv2_small().with_capped_rows(64)
    path = _small_plan(tmp_path, config.replace(multi_hot=(1,) * config.num_tables))
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = runner.invoke(app, ["train", "--plan", str(path), "--data", f"criteo:{data}", "--row-cap", "64",
                                     "--steps", "1", "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output


def test_a_plan_run_on_one_hot_file_data_says_its_prediction_is_not_this_runs(tmp_path):
    """Criteo files make every feature one lookup per sample after the plan was checked against the preset's
    (multi-hot) model: the run trained another model than the plan priced, without a word."""
    from polyrec.models.config import dcnv2_small

    path = _small_plan(tmp_path, dcnv2_small().with_capped_rows(64))
    data = Path(__file__).parent / "data" / "criteo_sample.tsv"
    result = runner.invoke(app, ["train", "--plan", str(path), "--data", f"criteo:{data}", "--row-cap", "64",
                                 "--steps", "1", "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 0, result.output
    assert ("lookups per sample of table 0 (the first that differs): the plan's 3, the run's 1): its choices are taken"
            in " ".join(result.stderr.split())), result.stderr


def test_a_plan_run_on_data_with_tables_of_its_own_is_refused(tmp_path):
    """MovieLens builds two tables of its own: a plan of the preset's 26 tables was applied to them in silence."""
    from polyrec.models.config import dcnv2_small

    path = _small_plan(tmp_path, dcnv2_small().with_capped_rows(64))
    data = Path(__file__).parent / "data" / "ml_sample.inter"
    result = runner.invoke(app, ["train", "--plan", str(path), "--data", f"movielens:{data}", "--row-cap", "64",
                                 "--steps", "1", "--device", "cpu", "--cpu-threads", "1"])
    assert result.exit_code == 2, result.output
    assert "this run's data builds another model than the plan's (tables: the plan's 26, the run's 2;" in (
        " ".join(result.stderr.split()))
