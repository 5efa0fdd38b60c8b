"""hipify: torch's mappings, hipify-clang-compatible headers/launches, and the gaps closed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate.hipify import hipify_source, mappings

SAMPLE = """// Copyright notice mentioning __global__ and cudaMalloc in a comment
#include <cuda.h>
#include <cuda_runtime.h>
#include "cublas_v2.h"
#include <cusolverDn.h>
#include <stdio.h>
#define LAUNCH(T, n) \\
  scale<T, 4><<<dim3((n + 255) / 256), 256, 0, stream>>>( \\
      x, n)
template <typename T, int V> __global__ void scale(T* x, int n) {
  float v = __shfl_down_sync(0xffffffff, x[threadIdx.x], 1);
  int c = __popc(__ballot_sync(0xffffffff, v > 0));
  x[threadIdx.x] = v + c;
}
void run(float* x, int n, cudaStream_t stream) {
  printf("cudaMalloc failed\\n");
  cudaMalloc(&x, n * sizeof(float));
  cusolverStatus_t st = CUSOLVER_STATUS_SUCCESS;
  cuTensorMapEncodeTiled();
  scale<float, 4><<<grid, block>>>(x, n);
  LAUNCH(float, n);
}
"""


def test_mapping_table_comes_from_torch():
    from torch.utils.hipify import cuda_to_hip_mappings as m

    idents, headers = mappings()
    torch_runtime = m.CUDA_RUNTIME_MAP if hasattr(m, "CUDA_RUNTIME_MAP") else m.CUDA_IDENTIFIER_MAP
    assert all(idents[k] == (v if isinstance(v, str) else v[0]) for k, v in list(torch_runtime.items())[:200]
               if k.isidentifier() and k in idents)
    assert idents["cudaMalloc"] == "hipMalloc" and headers["cublas_v2.h"] == "hipblas.h"


def test_default_output_keeps_chevrons_and_closes_gaps():
    out, report = hipify_source(SAMPLE, "sample.cu")
    assert "#include <hip/hip_runtime.h>" in out and "cuda_runtime.h" not in out
    assert out.count("hip/hip_runtime.h") == 1  # the second include of the same header is dropped
    assert '#include "hipblas.h"' in out and "hipblas/hipblas.h" not in out
    assert "#include <hipsolver.h>" in out
    assert "// Copyright notice mentioning __global__ and cudaMalloc in a comment" in out
    assert 'printf("cudaMalloc failed\\n")' in out and "hipMalloc(&x" in out
    assert "hipsolverStatus_t st = HIPSOLVER_STATUS_SUCCESS" in out
    assert "scale<float, 4><<<grid, block>>>(x, n)" in out
    assert "__shfl_down_sync(0xffffffffffffffffull" in out and "__popcll(__ballot_sync(0xffffffffffffffffull" in out
    assert "cuTensorMapEncodeTiled" in report.unmapped
    assert len(report.fixes) == 3


def test_launch_ggl_handles_templates_and_macros():
    out, report = hipify_source(SAMPLE, "sample.cu", launch_ggl=True)
    assert "hipLaunchKernelGGL(HIP_KERNEL_NAME(scale<float, 4>), dim3(grid), dim3(block), 0, 0, x, n)" in out
    assert ("hipLaunchKernelGGL(HIP_KERNEL_NAME(scale<T, 4>), dim3(dim3((n + 255) / 256)), dim3(256), 0, "
            "stream, \\\n      x, n)") in out
    assert report.launches_rewritten == 2 and "<<<" not in out


def test_runtime_header_placement_and_comment_not_fooling_it():
    cu, rep = hipify_source("// lic\n#pragma once\n#include <vector>\nint f();\n", "a.cu")
    assert cu == '// lic\n#pragma once\n#include "hip/hip_runtime.h"\n#include <vector>\nint f();\n'
    cpp, rep = hipify_source("// a __global__ kernel lives elsewhere\nint f();\n", "b.cpp")
    assert not rep.runtime_header_added and "hip_runtime" not in cpp
    dev, rep = hipify_source("__device__ int g();\n", "c.cpp")
    assert rep.runtime_header_added and dev.startswith('#include "hip/hip_runtime.h"\n')


def test_cli_writes_files_diff_and_report_for_non_utf8(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_bytes(SAMPLE.encode() + b"// caf\xe9 latin-1 byte\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = (out / "k.cu").read_bytes()
    assert data.endswith(b"// caf\xe9 latin-1 byte\n") and b"hipMalloc" in data
    assert "+#include <hip/hip_runtime.h>" in (out / "hipify.diff").read_text()
    report = json.loads((out / "hipify-report.json").read_text())
    assert report["files"][0]["renamed"]["cudaMalloc"] == "hipMalloc"
    assert report["left"] == []  # the sample's only hazards (32-bit masks, __popc) had safe rewrites
    (src / "k.cu").write_bytes(b"__global__ void k(int* o) { o[0] = threadIdx.x % 32; }\n")
    CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(out)])
    left = json.loads((out / "hipify-report.json").read_text())["left"]
    assert [f["rule"] for f in left] == ["PM101"]  # no safe rewrite: left for a person or the agent


# --- regressions ----------------------------------------------------------------------------------

def test_launch_ggl_template_argument_with_shift_or_comparison():
    src = ("constexpr int N = 256;\ntemplate <int H> __global__ void k(float* p) {}\n"
           "void launch(float* p) {\n  k<(N >> 1)><<<1, 64>>>(p);\n  k<(sizeof(float) > 2)><<<2, 32>>>(p);\n}\n")
    out, report = hipify_source(src, "t.cu", launch_ggl=True)
    assert "  hipLaunchKernelGGL(HIP_KERNEL_NAME(k<(N >> 1)>), dim3(1), dim3(64), 0, 0, p);\n" in out
    assert "  hipLaunchKernelGGL(HIP_KERNEL_NAME(k<(sizeof(float) > 2)>), dim3(2), dim3(32), 0, 0, p);\n" in out
    assert "constexpr int N = 256;\ntemplate <int H> __global__ void k(float* p) {}\n" in out
    assert report.launches_rewritten == 2


def test_digit_separators_and_raw_strings_in_the_lexer():
    src = ("void f(float** p) {\n  size_t n = 1'000; cudaMalloc(p, n); char c = 'x';\n"
           "  for (int i = 0; i < 2'048; ++i) cudaDeviceSynchronize(); int z = 4'096;\n}\n"
           'const char* kSrc = R"(\nextern "C" __global__ void k() { cudaStream_t s; }\n)";\n'
           'const char* kTwo = R"x(a)" cudaFree)x"; void g() { cudaFree(0); }\n')
    out, _ = hipify_source(src, "d.cu")
    assert "size_t n = 1'000; hipMalloc(p, n); char c = 'x';" in out
    assert "2'048; ++i) hipDeviceSynchronize(); int z = 4'096;" in out
    assert "{ cudaStream_t s; }" in out and 'R"x(a)" cudaFree)x"; void g() { hipFree(0); }' in out


def test_tree_skips_directories_named_like_sources_and_dangling_links(tmp_path):
    import warnings

    from polyrec.migrate.hipify import hipify_tree

    src = tmp_path / "src"
    (src / "x.cu").mkdir(parents=True)
    (src / "x.cu" / "k.cu").write_text("void f() { cudaDeviceSynchronize(); }\n")
    (src / "bad.cu").symlink_to(tmp_path / "missing.cu")
    skipped: dict[str, str] = {}
    reports, _ = hipify_tree(src, tmp_path / "out", skipped=skipped)
    assert [r.path for r in reports] == ["x.cu/k.cu"] and list(skipped) == ["bad.cu"]
    assert "hipDeviceSynchronize" in (tmp_path / "out" / "x.cu" / "k.cu").read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hipify_tree(src, tmp_path / "out2")
    assert any("bad.cu" in str(w.message) for w in caught)
    result = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(tmp_path / "out3")])
    assert result.exit_code == 0, result.output


def test_diff_marks_missing_final_newline_and_applies(tmp_path):
    import shutil
    import subprocess

    src = tmp_path / "src"
    src.mkdir()
    (src / "nonl.cu").write_text("#include <cuda_runtime.h>\nvoid f(float* p) { cudaFree(p); }")
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(out)]).exit_code == 0
    diff = (out / "hipify.diff").read_text()
    assert diff.count("\n\\ No newline at end of file\n") == 2
    git = shutil.which("git")
    if git:
        work = tmp_path / "apply"
        shutil.copytree(src, work)
        subprocess.run([git, "apply", "--unsafe-paths", str(out / "hipify.diff")], cwd=work, check=True)
        assert (work / "nonl.cu").read_bytes() == (out / "nonl.cu").read_bytes()


def test_runtime_header_goes_at_file_scope_outside_conditionals_and_comments():
    runtime = '#include "hip/hip_runtime.h"\n'
    kernel = "__global__ void k() {}\n"
    cases = {  # input -> where the runtime include must land
        "#ifdef USE_MPI\n#include <mpi.h>\n#endif\n#include <vector>\n" + kernel:
            runtime + "#ifdef USE_MPI\n#include <mpi.h>\n#endif\n#include <vector>\n" + kernel,
        "/* license\n#include <old.h>\n*/\n#include <vector>\n" + kernel:
            "/* license\n#include <old.h>\n*/\n" + runtime + "#include <vector>\n" + kernel,
        "// lic\n#define _USE_MATH_DEFINES\n#include <cmath>\n" + kernel:
            "// lic\n#define _USE_MATH_DEFINES\n" + runtime + "#include <cmath>\n" + kernel,
        "/* lic */\n#pragma once\n#define LAUNCH(f) \\\n  f<<<1, 1>>>()\n" + kernel:
            "/* lic */\n#pragma once\n#define LAUNCH(f) \\\n  f<<<1, 1>>>()\n" + runtime + kernel,
        "#ifndef K_CUH\n#define K_CUH\n#include <vector>\n" + kernel + "#endif\n":
            runtime + "#ifndef K_CUH\n#define K_CUH\n#include <vector>\n" + kernel + "#endif\n",
        "// ported from code that includes hip/hip_runtime.h\n" + kernel:
            "// ported from code that includes hip/hip_runtime.h\n" + runtime + kernel,
        "// nothing but a comment": "// nothing but a comment\n" + runtime,
    }
    for src, expected in cases.items():
        out, report = hipify_source(src, "k.cu")
        assert out == expected and report.runtime_header_added, (src, out)


def test_includes_in_comments_are_neither_renamed_nor_counted():
    src = "/* was:\n#include <cuda_runtime.h>\n*/\n#include <cuda_runtime.h>\n__global__ void k() {}\n"
    out, report = hipify_source(src, "k.cu")
    assert out == "/* was:\n#include <cuda_runtime.h>\n*/\n#include <hip/hip_runtime.h>\n__global__ void k() {}\n"
    assert report.headers == ["cuda_runtime.h -> hip/hip_runtime.h"] and not report.runtime_header_added


FP8_SRC = ("#include <cuda_fp8.h>\n__global__ void k(__nv_fp8_e4m3* out, const float* x) {\n"
           "  __nv_fp8_storage_t s = __nv_cvt_float_to_fp8(x[0], __NV_SATFINITE, __NV_E4M3);\n"
           "  out[0] = __nv_fp8_e4m3(x[1]);\n}\n")


def test_fp8_types_are_translated_only_for_a_target_with_the_same_format():
    neutral, _ = hipify_source(FP8_SRC, "f.cu")
    assert "#include <hip/hip_fp8.h>" in neutral
    assert "__hip_fp8_storage_t s = __hip_cvt_float_to_fp8(x[0], __HIP_SATFINITE, __NV_E4M3);" in neutral
    assert "__nv_fp8_e4m3* out" in neutral and "out[0] = __nv_fp8_e4m3(x[1]);" in neutral  # OCP: kept, flagged
    gfx942, _ = hipify_source(FP8_SRC, "f.cu", target="gfx942")
    assert gfx942 == neutral  # gfx942 device code has only the FNUZ formats: nothing exact to map to
    gfx950, report = hipify_source(FP8_SRC, "f.cu", target="gfx950")
    assert "__hip_cvt_float_to_fp8(x[0], __HIP_SATFINITE, __HIP_E4M3);" in gfx950
    assert "__hip_fp8_e4m3* out" in gfx950 and "out[0] = __hip_fp8_e4m3(x[1]);" in gfx950 and "__nv" not in gfx950
    assert report.renamed["__nv_fp8_e4m3"] == "__hip_fp8_e4m3"
    with pytest.raises(ValueError, match="gfx905.*gfx942, gfx950"):
        hipify_source(FP8_SRC, "f.cu", target="gfx905")


def test_fp8_left_for_gfx942_is_reported_by_the_scan(tmp_path):
    from polyrec.migrate.hipify import hipify_tree
    from polyrec.migrate.scan import scan_paths

    src = tmp_path / "src"
    src.mkdir()
    for name in ("f.cu", "g.cu"):  # two files: the target must hold for every file of a tree
        (src / name).write_text(FP8_SRC)
    hipify_tree(src, tmp_path / "942", target="gfx942")
    left = scan_paths([tmp_path / "942" / "g.cu"]).findings
    # line 1 is the added runtime header; cuda_fp8.h became hip/hip_fp8.h (the same header on every target)
    assert sorted((f.line, f.rule) for f in left) == [(3, "PM112"), (4, "PM112"), (5, "PM112")]
    assert "gfx942" in left[0].message and "fnuz" in left[0].message
    hipify_tree(src, tmp_path / "950", target="gfx950")
    assert scan_paths([tmp_path / "950"]).findings == []


def test_cli_hipify_takes_the_target(tmp_path):
    src = tmp_path / "f.cu"
    src.write_text(FP8_SRC)
    ok = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(tmp_path / "950"), "--target", "gfx950"])
    assert ok.exit_code == 0 and "__nv_fp8_e4m3" not in (tmp_path / "950" / "f.cu").read_text()
    bad = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(tmp_path / "x"), "--target", "gfx905"])
    assert bad.exit_code == 2 and "unknown target 'gfx905'" in bad.output


@pytest.mark.parametrize("launch_ggl", [False, True])
def test_dynamic_shared_memory_over_lds_is_still_reported_after_hipify(tmp_path, launch_ggl):
    from polyrec.migrate.hipify import hipify_tree
    from polyrec.migrate.scan import scan_paths

    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* a) { extern __shared__ float s[]; a[0] = s[0]; }\n"
                   "void run(float* a) {\n"
                   "  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);\n"
                   "  k<<<1, 128, 96 * 1024>>>(a);\n"
                   "}\n")
    before = sorted((f.line, f.rule) for f in scan_paths([src]).findings)
    assert before == [(3, "PM109"), (4, "PM109")]
    hipify_tree(src, tmp_path / "out", launch_ggl=launch_ggl)
    left = scan_paths([tmp_path / "out" / "k.cu"]).findings  # line 1 is the added runtime header
    # was: hipFuncSetAttribute and hipLaunchKernelGGL were not read, so the hazards vanished from the report
    assert sorted((f.line, f.rule) for f in left) == [(4, "PM109"), (5, "PM109")]
    assert "hipFuncSetAttribute opts in to 102400 B" in left[0].message


def test_an_output_directory_inside_the_tree_is_not_translated_again(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "k.cu").write_text("void f() { cudaDeviceSynchronize(); }\n")
    for _ in range(2):  # the second run used to translate the first run's output, into out/out/
        result = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(src / "out"), "--json"])
        assert result.exit_code == 0, result.output
        assert [f["path"] for f in json.loads(result.stdout)["files"]] == ["sub/k.cu"]
    assert not (src / "out" / "out").exists()
    outside = CliRunner().invoke(app, ["migrate", "hipify", str(src / "sub"), "-o", str(src), "--json"])
    assert outside.exit_code == 0 and (src / "k.cu").exists()  # an output directory above the sources


def test_cub_namespace_follows_its_header_to_hipcub():
    src = ("#include <cub/cub.cuh>\n"
           "// cub::DeviceRadixSort in a comment\n"
           "void sort(int* k, size_t n) {\n"
           "  size_t bytes = 0;\n"
           "  cub::DeviceRadixSort::SortKeys(nullptr, bytes, k, k, n);\n"
           "  using Reduce = ::cub :: BlockReduce<float, 256>;\n"
           "  int cub = 1;\n"
           "}\n")
    out, report = hipify_source(src, "s.cu")
    # was: the header became hipcub/hipcub.hpp and every cub:: stayed, which does not compile on ROCm
    assert "#include <hipcub/hipcub.hpp>" in out and "  hipcub::DeviceRadixSort::SortKeys(" in out
    assert "::hipcub :: BlockReduce<float, 256>" in out
    assert "// cub::DeviceRadixSort in a comment" in out and "int cub = 1;" in out
    assert report.renamed["cub"] == "hipcub"


def test_a_file_of_another_type_or_a_binary_is_not_translated(tmp_path):
    """A file named directly must be a source, as ``scan`` asks; a binary named like one is skipped."""
    notes = tmp_path / "notes.txt"
    notes.write_text("cudaMalloc\n")
    refused = CliRunner().invoke(app, ["migrate", "hipify", str(notes), "-o", str(tmp_path / "o1")])
    assert refused.exit_code == 2 and "unsupported file type '.txt'" in refused.output  # was: translated, exit 0
    binary = tmp_path / "lib.cu"
    binary.write_bytes(b"\x7fELF\x02\x01\x00\x00cudaMalloc")
    result = CliRunner().invoke(app, ["migrate", "hipify", str(binary), "-o", str(tmp_path / "o2"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["files"] == [] and doc["skipped"] == {"lib.cu": "a binary file (NUL bytes), not a source"}
    assert not (tmp_path / "o2" / "lib.cu").exists()  # was: a HIP header written into the binary


def test_an_include_in_another_branch_of_an_if_is_kept():
    """Was dropped as a second include of the same HIP header: without USE_DRIVER_API the file had none."""
    src = ("#ifdef USE_DRIVER_API\n#include <cuda.h>\n#else\n#include <cuda_runtime.h>\n#endif\n"
           "#include <cuda_runtime.h>\nvoid alloc(float** p, size_t n) { cudaMalloc(p, n); }\n")
    out, _ = hipify_source(src, "a.cpp")
    assert out == ("#ifdef USE_DRIVER_API\n#include <hip/hip_runtime.h>\n#else\n#include <hip/hip_runtime.h>\n"
                   "#endif\n#include <hip/hip_runtime.h>\nvoid alloc(float** p, size_t n) { hipMalloc(p, n); }\n")
    seen = "#include <cuda_runtime.h>\n#ifdef X\n#include <cuda_runtime.h>\n#endif\n"  # seen from inside: dropped
    assert hipify_source(seen, "b.cpp")[0] == "#include <hip/hip_runtime.h>\n#ifdef X\n\n#endif\n"
    kernel = "#ifdef X\n#include <cuda_runtime.h>\n#endif\n__global__ void k() {}\n"  # no file-scope include
    assert hipify_source(kernel, "k.cu")[0].startswith('#include "hip/hip_runtime.h"\n#ifdef X\n')


def test_launch_ggl_leaves_a_configuration_with_template_commas_as_chevrons():
    """Was split at the comma of Traits<4, 64>: dim3(Traits<4), 64>::kThreads as block and shared memory."""
    src = ("template <int M, int N> struct Traits { static constexpr int kThreads = M * N; };\n"
           "__global__ void k(float* x) {}\nvoid run(float* x, dim3 g) {\n  k<<<g, Traits<4, 64>::kThreads>>>(x);\n"
           "  k<<<g, 256>>>(x);\n}\n")
    out, report = hipify_source(src, "t.cu", launch_ggl=True)
    assert "  k<<<g, Traits<4, 64>::kThreads>>>(x);\n" in out
    assert "  hipLaunchKernelGGL(k, dim3(g), dim3(256), 0, 0, x);\n" in out and report.launches_rewritten == 1


def test_a_projects_version_names_are_not_renamed():
    """torch's table maps MAJOR_VERSION & co. (library_types.h, no CUDA prefix) to names HIP lacks."""
    src = "struct V { int MAJOR_VERSION; int MINOR_VERSION; };\nint p = PATCH_LEVEL + cudaSuccess;\n"
    out, _ = hipify_source(src, "v.cpp")
    assert out == "struct V { int MAJOR_VERSION; int MINOR_VERSION; };\nint p = PATCH_LEVEL + hipSuccess;\n"


def test_a_tree_leaves_out_environments_and_build_folders(tmp_path):
    """Was: `hipify . -o out` translated every vendored header under .venv and build (the scan leaves them out)."""
    from polyrec.migrate.hipify import hipify_tree

    for rel in ("src/k.cu", ".venv/lib/site/v.h", "build/gen.cu", "third/.git/x.h"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("__global__ void k() {}\n")
    reports, _ = hipify_tree(tmp_path, tmp_path.parent / "out")
    assert [r.path for r in reports] == ["src/k.cu"]


def test_an_old_mac_file_is_translated_and_keeps_its_line_ends(tmp_path):
    """A file whose lines end in a lone CR: its first // comment hid the whole file (nothing renamed, the HIP
    header appended at its end)."""
    lines = ["// kernel", "#include <cuda_runtime.h>", "__global__ void k(float* x) { x[threadIdx.x] = 0; }",
             "void run(float* x) { cudaDeviceSynchronize(); }", ""]
    out, report = hipify_source("\r".join(lines), "k.cu")
    assert "\n" not in out
    got = out.split("\r")
    assert got[0] == "// kernel" and got[1] == "#include <hip/hip_runtime.h>"
    assert "hipDeviceSynchronize();" in got[3] and "cudaDeviceSynchronize" not in out
    assert report.changed


def test_a_utf8_bom_stays_first_and_hides_no_include():
    """Was: the HIP runtime include went before the BOM (a stray U+FEFF on line 2, which clang refuses) and an
    #include right after the BOM was not renamed (cuda_runtime.h stayed)."""
    out, report = hipify_source("\ufeff#include <cuda_runtime.h>\n__global__ void k(float* x) { x[0] = 0; }\n",
                                "k.cu")
    assert out == "\ufeff#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 0; }\n"
    assert report.headers == ["cuda_runtime.h -> hip/hip_runtime.h"]
    out, _ = hipify_source("\ufeff__global__ void k(float* x) { x[0] = 0; }\n", "k.cu")
    assert out == '\ufeff#include "hip/hip_runtime.h"\n__global__ void k(float* x) { x[0] = 0; }\n'


def test_the_runtime_include_takes_the_line_ends_of_a_crlf_file():
    """Was: the include added to a CR LF file ended in a bare LF, one mixed line end in the file."""
    out, _ = hipify_source("#include <cstdio>\r\n__global__ void k(float* x) { x[0] = 0; }\r\n", "k.cu")
    assert out == '#include "hip/hip_runtime.h"\r\n#include <cstdio>\r\n__global__ void k(float* x) { x[0] = 0; }\r\n'


def test_a_folder_that_cannot_be_listed_is_skipped_by_name(tmp_path, monkeypatch):
    """Was: pathlib's rglob left an unreadable folder out without a word. Simulated, since root reads all."""
    import os

    from polyrec.migrate.hipify import hipify_tree

    (tmp_path / "src" / "locked").mkdir(parents=True)
    (tmp_path / "src" / "k.cu").write_text("void f() { cudaDeviceSynchronize(); }\n")
    (tmp_path / "src" / "locked" / "a.cu").write_text("void g() {}\n")
    scandir = os.scandir

    def refuse_listing(path="."):
        if os.path.basename(path) == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refuse_listing)
    skipped: dict[str, str] = {}
    reports, _ = hipify_tree(tmp_path / "src", tmp_path / "out", skipped=skipped)
    assert [r.path for r in reports] == ["k.cu"]
    assert skipped == {"locked": "cannot list the folder: Permission denied"}


def test_an_earlier_runs_output_elsewhere_in_the_tree_is_not_translated_again(tmp_path):
    """Only the current -o folder was left out of the walk: the output of an earlier run into another folder of the
    tree (src/hip_v1) was translated again, into src/hip_v2/hip_v1/. Each run lists what it wrote in its output
    folder (OUTPUT_LIST), and a walk leaves those files out, not the folder's other sources."""
    from polyrec.migrate.hipify import OUTPUT_LIST

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "k.cu").write_text("void f() { cudaDeviceSynchronize(); }\n")
    first = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(src / "hip_v1"), "--json"])
    assert first.exit_code == 0, first.output
    assert (src / "hip_v1" / OUTPUT_LIST).read_text().splitlines() == ["sub/k.cu"]
    (src / "hip_v1" / "mine.cu").write_text("void g() { cudaFree(0); }\n")  # the user's own source beside them
    second = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(src / "hip_v2"), "--json"])
    assert second.exit_code == 0, second.output
    assert sorted(f["path"] for f in json.loads(second.stdout)["files"]) == ["hip_v1/mine.cu", "sub/k.cu"]
    into_sources = CliRunner().invoke(app, ["migrate", "hipify", str(src / "sub"), "-o", str(src), "--json"])
    assert into_sources.exit_code == 0 and (src / "k.cu").exists()
    third = CliRunner().invoke(app, ["migrate", "hipify", str(src), "-o", str(tmp_path / "out"), "--json"])
    assert sorted(f["path"] for f in json.loads(third.stdout)["files"]) == ["hip_v1/mine.cu", "sub/k.cu"]
