"""benchmarks/tbe_checkout_ab.py's plumbing on the CPU (its trials need a GPU): kernel times by name,
the summary per row dtype, bad --dtypes."""

from __future__ import annotations

import pytest

from benchmark_util import load_benchmark

ab = load_benchmark("tbe_checkout_ab")


def test_kernel_times_are_summed_by_name_prefix():
    kernels = [{"kernel": name, "ms_per_step": ms} for name, ms in (
        ("lane_update_kernel", 3.0), ("merge_level_kernel", 0.5), ("merge_level_kernel_b", 0.25),
        ("pooled_forward_kernel", 1.0))]
    assert ab.kernel_ms(kernels, ab.KERNELS["merge"]) == 0.75
    assert ab.kernel_ms(kernels, ab.KERNELS["update"]) == 3.0
    assert ab.kernel_ms(kernels, ab.KERNELS["sort"]) == 0


def test_the_summary_gives_each_dtype_its_medians_ratio_and_checksum_agreement():
    rows = [{"dtype": "fp16", "checkout": c, "step_ms": s, "update_ms": u, "checksum": k}
            for c, s, u, k in (("base", 6.0, 3.8, 1.5), ("change", 5.4, 3.2, 1.5), ("base", 6.2, 3.9, 1.5),
                               ("change", 5.6, 3.1, 1.5))]
    rows += [{"dtype": "bf16", "checkout": c, "step_ms": 5.0, "update_ms": 3.0, "checksum": k}
             for c, k in (("base", 2.0), ("change", 2.5))]
    got = ab.summarize(rows, ["fp16", "bf16"])
    assert got["fp16_step_ms"] == {"base": 6.1, "change": 5.5}
    assert got["fp16_update_ms_change_over_base"] == pytest.approx(3.15 / 3.85)
    assert got["fp16_same_checksum"] and not got["bf16_same_checksum"]


def test_dtypes_must_be_row_precisions():
    assert ab.parse_dtypes("fp32,bf16") == ["fp32", "bf16"]
    with pytest.raises(SystemExit, match="int8 not fp32, fp16 or bf16"):
        ab.parse_dtypes("fp16,int8")


def test_the_child_is_python_that_names_its_polyrec():
    compile(ab.CHILD, "tbe_checkout_ab child", "exec")
    assert '"polyrec_file": polyrec.__file__' in ab.CHILD
