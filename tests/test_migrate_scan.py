"""Scanner: precision/recall on the labelled corpus, rule coverage, SARIF schema, CLI exit codes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate import scan_cuda
from polyrec.migrate.rules import RULES
from polyrec.migrate.sarif import to_sarif
from polyrec.migrate.scan import scan_paths

CORPUS = Path(__file__).parent / "migrate_corpus" / "scan"
SCHEMA = Path(__file__).parent / "migrate_corpus" / "schema" / "sarif-schema-2.1.0.json"
COMPILE_ONLY_RULES = {"PM111"}  # found by compiling (tests/test_migrate_verify.py), not by parsing


def expected_findings() -> set[tuple[str, int, str]]:
    expected = set()
    for path in CORPUS.iterdir():
        if path.suffix == ".md":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = re.search(r"expect: (PM\d+(?:, PM\d+)*)", line)
            if match:
                expected |= {(path.name, number, rule) for rule in match.group(1).split(", ")}
    return expected


def test_precision_and_recall_on_corpus():
    result = scan_paths([CORPUS])
    assert result.complete, result.not_scanned
    got = {(Path(f.path).name, f.line, f.rule) for f in result.findings}
    expected = expected_findings()
    true_pos = len(got & expected)
    precision, recall = true_pos / len(got), true_pos / len(expected)
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, sorted(got - expected), sorted(expected - got))


def test_every_rule_has_positive_and_negative_examples():
    expected_rules = {rule for _, _, rule in expected_findings()}
    assert set(RULES) - COMPILE_ONLY_RULES <= expected_rules
    for rule in set(RULES) - COMPILE_ONLY_RULES:
        languages = RULES[rule].languages
        suffixes = {".py"} if languages == ("python",) else {".cu", ".cuh", ".py"}
        negatives = [p for p in CORPUS.glob("neg_*") if p.suffix in suffixes]
        assert negatives, rule
    negatives = scan_paths(sorted(CORPUS.glob("neg_*")))
    assert negatives.findings == []


def test_rocm_compatible_calls_are_not_flagged(tmp_path):
    src = tmp_path / "ok.py"
    src.write_text("import torch\nimport torch.distributed as dist\n"
                   "dist.init_process_group('nccl')\nx = torch.ones(3, device='cuda')\n"
                   "torch.cuda.synchronize()\ntorch.cuda.nvtx.range_push('a')\n"
                   "n = torch.cuda.device_count()\nprops = torch.cuda.get_device_properties(0)\n")
    assert scan_paths([src]).findings == []


def test_sarif_validates_against_schema():
    sarif = to_sarif(scan_paths([CORPUS]))
    jsonschema.validate(sarif, json.loads(SCHEMA.read_text()))
    run = sarif["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == set(RULES)
    assert run["results"] and all(r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1
                                  for r in run["results"])


def test_cli_exit_codes_json_and_sarif(tmp_path):
    runner = CliRunner()
    dirty = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu"), "--json"])
    assert dirty.exit_code == 1, dirty.output
    assert {f["rule"] for f in json.loads(dirty.output)["findings"]} == {"PM101", "PM102"}
    clean = runner.invoke(app, ["migrate", "scan", str(CORPUS / "neg_warp.cu"), "--sarif", str(tmp_path / "o.sarif")])
    assert clean.exit_code == 0, clean.output
    jsonschema.validate(json.loads((tmp_path / "o.sarif").read_text()), json.loads(SCHEMA.read_text()))
    notes_only = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_libs.cu"), "--rule", "PM105"])
    assert notes_only.exit_code == 0  # CUB is a note; the default --fail-on is warning
    strict = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_libs.cu"), "-r", "PM105", "--fail-on", "note"])
    assert strict.exit_code == 1
    assert runner.invoke(app, ["migrate", "scan", str(tmp_path / "missing")]).exit_code == 2
    assert runner.invoke(app, ["migrate", "scan", str(CORPUS), "--rule", "PM999"]).exit_code == 2


def test_missing_parser_reports_cuda_files_as_not_scanned(monkeypatch):
    def missing():
        raise scan_cuda.ParserMissing(f"scanning CUDA/C++ needs tree-sitter-cuda: {scan_cuda.INSTALL_HINT}")

    monkeypatch.setattr(scan_cuda, "_language", missing)
    result = scan_paths([CORPUS])
    cuda_files = {p.name for p in CORPUS.iterdir() if p.suffix in (".cu", ".cuh")}
    assert {Path(p).name for p in result.not_scanned} == cuda_files
    assert all("tree-sitter-cuda" in why for why in result.not_scanned.values())
    assert {Path(f.path).suffix for f in result.findings} == {".py"}
    runner = CliRunner()
    assert runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu")]).exit_code == 2


@pytest.mark.parametrize("suffix", [".cu", ".py"])
def test_non_utf8_source_is_scanned(tmp_path, suffix):
    src = tmp_path / f"latin1{suffix}"
    line = b"int lane = threadIdx.x % 32; // caf\xe9\n" if suffix == ".cu" else b"WARP_SIZE = 32  # caf\xe9\n"
    src.write_bytes(line)
    assert [f.rule for f in scan_paths([src]).findings] == ["PM101"]


# --- regressions (scan crashes, false negatives / positives) ---------------------------------------

def _scan_text(tmp_path, name: str, text: str | bytes):
    src = tmp_path / name
    src.write_bytes(text if isinstance(text, bytes) else text.encode())
    return scan_paths([src])


def _rules(result) -> list[tuple[int, str]]:
    return sorted((f.line, f.rule) for f in result.findings)


def test_c_integer_literals_never_abort_the_scan(tmp_path):
    from polyrec.migrate.cexpr import evaluate

    assert [evaluate(t, {}) for t in ("0777", "07", "4'096", "0x1'00u", "0b101", "10ul", "0")] == \
        [511, 7, 4096, 256, 5, 10, 0]
    assert evaluate("09", {}) is None and evaluate("1 << 100000000000", {}) is None
    src = ("#define BYTES (4'096 * 8'192)\n"
           "__global__ void k(){ int l = threadIdx.x & 0x1f; int y = 1 & 0777; __shared__ float s[BYTES]; }\n")
    result = _scan_text(tmp_path, "oct.cu", src)
    assert result.complete and _rules(result) == [(2, "PM101"), (2, "PM108")]


def test_unsigned_masks_read_as_full_32_bit_masks(tmp_path):
    from polyrec.migrate.cexpr import evaluate

    assert evaluate("(~0u)", {}) == evaluate("(unsigned)-1", {}) == evaluate("(unsigned int)-1", {}) == 0xFFFFFFFF
    assert evaluate("~0ull", {}) == (1 << 64) - 1 and evaluate("~0", {}) == -1
    src = ("#define FULL_MASK (~0u)\n__global__ void k(float* x) {\n  float v = x[0];\n"
           "  v += __shfl_xor_sync(FULL_MASK, v, 1);\n  v += __shfl_xor_sync((unsigned)-1, v, 1);\n"
           "  v += __shfl_xor_sync(0xffffffffffffffffull, v, 1);\n  x[0] = v;\n}\n")
    assert _rules(_scan_text(tmp_path, "mask.cu", src)) == [(4, "PM102"), (5, "PM102")]


def test_ballot_as_constructor_argument_does_not_crash(tmp_path):
    src = ("struct Mask { __device__ Mask(unsigned long long v) : v(v) {} unsigned long long v; };\n"
           "__global__ void k(int* out) { Mask* m = new Mask(__activemask()); out[0] = (int)m->v; }\n")
    assert _scan_text(tmp_path, "ctor.cu", src).complete
    result = CliRunner().invoke(app, ["migrate", "scan", str(tmp_path), "--json"])
    assert json.loads(result.output)["not_scanned"] == {}


def test_deeply_nested_python_is_reported_not_scanned(tmp_path):
    deep = tmp_path / "deep.py"
    deep.write_text("x = " + " + ".join(["1"] * 3000) + "\n")
    (tmp_path / "ok.py").write_text("WARP_SIZE = 32\n")
    result = scan_paths([tmp_path])
    assert list(result.not_scanned) == [str(deep)] and "nested too deeply" in result.not_scanned[str(deep)]
    assert [f.rule for f in result.findings] == ["PM101"]


def test_guards_match_whole_identifiers_only(tmp_path):
    cu = ("#ifndef FLASHCHIP_REDUCE_CUH\n#define FLASHCHIP_REDUCE_CUH\n#define WARP_SIZE 32\n"
          "__device__ void f() { asm volatile(\"bar.sync 0;\"); }\n#endif\n"
          "#ifdef __HIP_PLATFORM_AMD__\n__device__ void g() { asm volatile(\"s_nop 0\"); }\n#endif\n")
    assert _rules(_scan_text(tmp_path, "guard.cuh", cu)) == [(3, "PM101"), (4, "PM103")]
    py = ("import torch\nnum_chips = 2\nif num_chips > 1:\n    import pynvml\n"
          "    if torch.version.cuda:\n        pass\n    if torch.cuda.get_device_capability()[0] >= 9:\n        pass\n"
          "if torch.version.hip:\n    import pynvml\n")
    assert _rules(_scan_text(tmp_path, "chips.py", py)) == [(4, "PM205"), (5, "PM203"), (7, "PM202")]


def test_else_of_cuda_arch_conditional_is_not_guarded(tmp_path):
    src = ("__device__ float f(float v) {\n#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
           "  v += __shfl_xor_sync(0xffffffff, v, 1);\n#else\n  v += __shfl_xor_sync(0xffffffff, v, 2);\n#endif\n"
           "#ifndef __CUDA_ARCH__\n  v += __shfl_xor_sync(0xffffffff, v, 3);\n#else\n"
           "  v += __shfl_xor_sync(0xffffffff, v, 4);\n#endif\n"
           "#ifdef USE_ROCM\n  v += 1;\n#else\n  v += __shfl_xor_sync(0xffffffff, v, 5);\n#endif\n  return v;\n}\n")
    assert _rules(_scan_text(tmp_path, "else.cu", src)) == [(5, "PM102"), (8, "PM102")]


def test_warp_count_and_tile_names_are_not_warp_sizes(tmp_path):
    src = ("constexpr int kWarpsPerBlock = 32;\nconstexpr int kWarpTileM = 32;\nconstexpr int kWarp = 32;\n"
           "constexpr int kWarpSize = 32;\n")
    assert _rules(_scan_text(tmp_path, "names.cu", src)) == [(3, "PM101"), (4, "PM101")]


def test_aligned_shared_arrays_count_toward_shared_memory(tmp_path):
    src = ("__global__ void k1(float* x) {\n  __shared__ __align__(16) float buf[32768];\n  x[0] = buf[0];\n}\n"
           "__global__ void k2(float* x) {\n  __shared__ alignas(16) float b2[32768];\n  x[0] = b2[0];\n}\n")
    result = _scan_text(tmp_path, "align.cu", src)
    assert _rules(result) == [(2, "PM108"), (6, "PM108")]
    assert result.findings[0].column == 3 and "__align__(16)" in result.findings[0].snippet


def test_bom_python_is_scanned_and_form_feeds_keep_line_numbers(tmp_path):
    bom = _scan_text(tmp_path, "bom.py", b"\xef\xbb\xbfWARP_SIZE = 32\n")
    assert bom.complete and _rules(bom) == [(1, "PM101")]
    py = _scan_text(tmp_path, "ff.py", "x = 1  # a\x0cb\n\x0c\nWARP_SIZE = 32\n")
    assert _rules(py) == [(3, "PM101")] and py.findings[0].snippet == "WARP_SIZE = 32"
    cu = _scan_text(tmp_path, "ff.cu", "// page\x0cbreak\n\x0c\n#define WARP_SIZE 32\n")
    assert _rules(cu) == [(3, "PM101")] and cu.findings[0].snippet == "#define WARP_SIZE 32"


def test_sarif_dash_is_stdout(tmp_path, monkeypatch):
    """`--sarif -` wrote a file named "-" in the working folder; a CI step piping it on got nothing. Now SARIF is
    stdout's one document and the table goes to stderr; with --json (stdout too) it is refused."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu"), "--sarif", "-"])
    assert result.exit_code == 1, result.output
    sarif = json.loads(result.stdout)
    jsonschema.validate(sarif, json.loads(SCHEMA.read_text()))
    assert sarif["runs"][0]["results"] and "AMD hazards" in result.stderr
    assert not (tmp_path / "-").exists()
    both = runner.invoke(app, ["migrate", "scan", str(CORPUS / "pos_warp.cu"), "--sarif", "-", "--json"])
    assert both.exit_code == 2 and "--sarif - and --json both print to stdout" in both.stderr, both.output


def test_sarif_uri_is_percent_encoded(tmp_path):
    d = tmp_path / "my dir#1"
    d.mkdir()
    (d / "k 100%.py").write_text("WARP_SIZE = 32\n")
    sarif = to_sarif(scan_paths([d]))
    uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri.endswith("/my%20dir%231/k%20100%25.py") and " " not in uri
    jsonschema.validate(sarif, json.loads(SCHEMA.read_text()))


def test_corpus_files_of_the_audit_misses_are_scanned_exactly():
    names = ("pos_fp8.cu", "neg_fp8.cu", "pos_warp.cu", "neg_warp.cu", "pos_triton.py", "neg_triton.py",
             "pos_python_runtime.py", "neg_python_runtime.py")
    got = {(Path(f.path).name, f.line, f.rule) for f in scan_paths([CORPUS / n for n in names]).findings}
    expected = {e for e in expected_findings() if e[0] in names}
    assert got == expected, (sorted(got - expected), sorted(expected - got))


def test_cuda_fp8_types_name_both_amd_formats(tmp_path):
    result = _scan_text(tmp_path, "q.cu", "#include <cuda_fp8.h>\n__device__ __nv_fp8x4_e4m3 q(float4 v);\n"
                                          "__device__ int e() { return __NV_E4M3; }\n"
                                          "#ifdef __HIP_PLATFORM_AMD__\n__device__ __nv_fp8_e5m2 r;\n#endif\n")
    assert _rules(result) == [(1, "PM112"), (2, "PM112"), (3, "PM112")]
    message = result.findings[1].message
    assert "__hip_fp8x4_e4m3" in message and "gfx950" in message and "gfx942" in message and "fnuz" in message


def test_macro_bodies_are_scanned_like_code(tmp_path):
    src = ("#define FULL 0xffffffff\n"
           "#define WARP_REDUCE(x) __shfl_down_sync(0xffffffff, x, 16)\n"
           "#define LANE (threadIdx.x & 31)\n"
           "#define SUM(v) \\\n  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o)\n"
           "#define KERNEL(T) __global__ void k_##T(T* x) { x[threadIdx.x % 32] = 0; }\n"
           "#define PTX(r) asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(r))\n"
           "#ifdef USE_ROCM\n#define R2(x) __shfl_down_sync(0xffffffff, x, 32)\n#endif\n"
           "#define OK(x) __shfl_down(x, warpSize / 2)\n")
    result = _scan_text(tmp_path, "m.cu", src)
    assert _rules(result) == [(2, "PM102"), (3, "PM101"), (5, "PM101"), (5, "PM102"), (6, "PM101"), (7, "PM103")]
    located = {(f.line, f.column, f.snippet) for f in result.findings}
    assert (2, 24, src.splitlines()[1]) in located and (5, 3, src.splitlines()[4].strip()) in located


def test_annotated_warp_size_assignment(tmp_path):
    result = _scan_text(tmp_path, "a.py", "WARP_SIZE: int = 32\nself_warp_size: int = 64\nBLOCK: int = 32\n"
                                          "class C:\n    threads_per_warp: int = 32\n")
    assert _rules(result) == [(1, "PM101"), (5, "PM101")]


def test_capability_read_through_a_properties_variable(tmp_path):
    src = ("import torch\nprops = torch.cuda.get_device_properties(0)\nn = props.multi_processor_count\n"
           "if props.major >= 9:\n    pass\ncap = (props.major, props.minor)\nuse = cap >= (9, 0)\n"
           "p2: object = torch.cuda.get_device_properties(0)\nok = p2.minor == 0\n"
           "if torch.version.hip is None and props.major == 8:\n    pass\nbig = n > 100\n")
    assert _rules(_scan_text(tmp_path, "p.py", src)) == [(4, "PM202"), (7, "PM202"), (9, "PM202")]


def test_ptx_approximate_ops_in_triton_inline_asm(tmp_path):
    def asm(text: str) -> str:
        return f"y = tl.inline_asm_elementwise({text!r}, '=r,r', [x], dtype=tl.float32, is_pure=True, pack=1)\n"

    src = ("import triton.language as tl\n" + asm("tanh.approx.f32 $0, $1;") + asm("ex2.approx.ftz.f32 $0, $1;")
           + asm("rcp.approx.ftz.f64 $0, $1;") + asm("{ lg2.approx.f32 $0, $1; }") + asm("v_exp_f32 $0, $1")
           + asm("sqrt.rn.f32\t$0, $1;"))
    result = _scan_text(tmp_path, "t.py", src)
    assert _rules(result) == [(2, "PM103"), (3, "PM103"), (4, "PM103"), (5, "PM103"), (7, "PM103")]
    assert "tanh.approx" in result.findings[0].message and "libdevice" in result.findings[0].message
    assert "interpreter cannot run libdevice" in result.findings[0].message  # tl.math first: verify can run it


def test_a_file_of_another_type_is_not_scanned_with_the_suffixes_read(tmp_path):
    (tmp_path / "notes.txt").write_text("#define WARP_SIZE 32\n")
    result = CliRunner().invoke(app, ["migrate", "scan", str(tmp_path / "notes.txt"), "--json"])
    assert result.exit_code == 2, result.output
    why = json.loads(result.stdout)["not_scanned"][str(tmp_path / "notes.txt")]
    # was: "scanner error: ValueError: ... (expected .py, .cu, .cuh, .cpp, .h)", as if the scanner had failed,
    # and without the .cc / .cxx / .hpp it reads
    assert why == "unsupported file type '.txt' (expected .cc, .cpp, .cu, .cuh, .cxx, .h, .hpp, .py)"


def test_a_file_with_nul_bytes_is_not_scanned_not_reported_clean(tmp_path):
    """UTF-16 text read as UTF-8 bytes parsed to nothing: 'files 1, findings []' for a warp-size hazard."""
    (tmp_path / "w16.cu").write_text("#define WARP_SIZE 32\n", encoding="utf-16")
    (tmp_path / "w8.cu").write_text("#define WARP_SIZE 32\n")
    result = scan_paths([tmp_path])
    assert [Path(f.path).name for f in result.findings] == ["w8.cu"] and result.files_scanned == 1
    assert "not UTF-8 (UTF-16?)" in next(v for k, v in result.not_scanned.items() if k.endswith("w16.cu"))


def test_sarif_percent_encodes_a_file_name_that_is_not_utf8(tmp_path):
    """Was a UnicodeEncodeError traceback (the name's undecodable byte held as a surrogate)."""
    name = b"caf\xe9.cu".decode("utf-8", "surrogateescape")
    (tmp_path / name).write_text("#define WARP_SIZE 32\n")
    sarif = to_sarif(scan_paths([tmp_path]))
    assert sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith(
        "caf%E9.cu")


def test_a_file_named_twice_is_scanned_once(tmp_path):
    """Was: `scan d d/a.cu` gave each finding twice and counted the file's lines twice."""
    (tmp_path / "a.cu").write_text("#define WARP_SIZE 32\n")
    once, twice = scan_paths([tmp_path]), scan_paths([tmp_path, tmp_path / "a.cu", tmp_path])
    assert (twice.files_scanned, twice.lines_scanned, len(twice.findings)) == \
        (once.files_scanned, once.lines_scanned, len(once.findings)) == (1, 1, len(once.findings))


def test_warps_per_block_enumerators_and_template_defaults_are_warp_sizes(tmp_path):
    """Were missed: warps per block from blockDim, and a warp size held in an enum, a template default or a
    class constant. A 32 on another operand or under another name stays clean."""
    src = ("enum { WARP_SIZE = 32 };\n"
           "enum Tiles { kTile = 32, kRows = 31 };\n"
           "template <int kWarpSize = 32, int BLOCK = 32>\n__device__ void f() {}\n"
           "struct S { static constexpr int WARP_SIZE = 32; static constexpr int kAlign = 32; };\n"
           "__global__ void k(int* out, int n) {\n"
           "  int warps = blockDim.x / 32;\n  int warps2 = blockDim.x >> 5;\n  int partial = blockDim.x % 32;\n"
           "  int lane = threadIdx.x & 31;\n"
           "  int a = n & 31;\n  int b = n / 32;\n  int c = gridDim.x / 32;\n  int d = blockIdx.x & 31;\n"
           "  out[0] = warps + warps2 + partial + lane + a + b + c + d + kTile + kRows;\n}\n")
    result = _scan_text(tmp_path, "w.cu", src)
    assert _rules(result) == [(1, "PM101"), (3, "PM101"), (5, "PM101"), (7, "PM101"), (8, "PM101"),
                              (9, "PM101"), (10, "PM101")]
    assert [f.snippet for f in result.findings][:3] == [src.splitlines()[i] for i in (0, 2, 4)]


def test_unsigned_long_holds_a_64_lane_ballot(tmp_path):
    """Was a false positive: unsigned long is 64-bit on Linux (LP64), where ROCm runs."""
    src = ("__global__ void k(unsigned long long* out, int v) {\n"
           "  unsigned long a = __ballot_sync(0xffffffffffffffffull, v > 0);\n"
           "  unsigned int b = __ballot_sync(0xffffffffffffffffull, v > 1);\n"
           "  unsigned c = __activemask();\n  uint32_t d = __activemask();\n"
           "  int e = __ballot_sync(0xffffffffffffffffull, v > 2);\n"
           "  unsigned long long f = __activemask();\n  out[0] = a + b + c + d + e + f;\n}\n")
    assert _rules(_scan_text(tmp_path, "b.cu", src)) == [(3, "PM102"), (4, "PM102"), (5, "PM102"), (6, "PM102")]


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_old_mac_line_endings_keep_line_numbers(tmp_path, eol):
    """Was: tree-sitter ends lines at LF only, so in a CR-only file the first // comment ran to the end of the
    file and hid every hazard; CR-only files also counted as one line."""
    lines = ["// reduce.cu", "#define WARP_SIZE 32", "__global__ void k(int* o) {", "  o[0] = threadIdx.x % 32;", "}"]
    cu = _scan_text(tmp_path, "cr.cu", eol.join(lines) + eol)
    assert _rules(cu) == [(2, "PM101"), (4, "PM101")] and cu.lines_scanned == 5
    assert (cu.findings[1].column, cu.findings[1].snippet) == (10, "o[0] = threadIdx.x % 32;")
    py = _scan_text(tmp_path, "cr.py", eol.join(["# a", "x = 1", "WARP_SIZE = 32"]) + eol)
    assert _rules(py) == [(3, "PM101")] and py.lines_scanned == 3


def test_unreadable_files_and_folders_are_listed_not_scanned(tmp_path, monkeypatch):
    """Were: an unreadable file raised PermissionError out of `scan` (a traceback), and an unreadable folder was
    left out without a word (pathlib's rglob skips it), so the scan exited 0. Simulated, since root reads all."""
    (tmp_path / "ok.cu").write_text("int x;\n")
    (tmp_path / "secret.cu").write_text("#define WARP_SIZE 32\n")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "a.cu").write_text("#define WARP_SIZE 32\n")
    read_bytes, scandir = Path.read_bytes, os.scandir

    def refuse_read(self):
        if self.name == "secret.cu":
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    def refuse_listing(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(Path, "read_bytes", refuse_read)
    monkeypatch.setattr(os, "scandir", refuse_listing)
    result = CliRunner().invoke(app, ["migrate", "scan", str(tmp_path), "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout)["not_scanned"] == {
        str(tmp_path / "locked"): "cannot list the folder: Permission denied",
        str(tmp_path / "secret.cu"): "cannot read: Permission denied"}


def test_a_utf8_bom_is_not_part_of_the_first_line(tmp_path):
    """Was: in a CUDA file with a BOM the first line's findings were at column 4 (the BOM's bytes) with the BOM in
    the snippet; the Python scan already reads past it."""
    result = _scan_text(tmp_path, "b.cu", b"\xef\xbb\xbf#define WARP_SIZE 32\n#include <cudnn.h>\n")
    assert [(f.line, f.column, f.rule, f.snippet) for f in result.findings] == [
        (1, 1, "PM101", "#define WARP_SIZE 32"), (2, 1, "PM107", "#include <cudnn.h>")]
    result = _scan_text(tmp_path, "c.cu", b"\xef\xbb\xbf#include <cudnn.h>\n")
    assert [(f.line, f.column, f.rule) for f in result.findings] == [(1, 1, "PM107")]


def test_cuda_warp_names_are_read_as_the_python_scan_reads_them(tmp_path):
    """Were missed in CUDA though the Python scan flags the same names: CUB's WARP_THREADS, a bare WARP,
    LANES_PER_WARP. A warp tiling or a count of warps stays clean, as in Python."""
    src = ("#define WARP 32\nconstexpr int WARP_THREADS = 32;\nenum { kWarpThreads = 32, LANES_PER_WARP = 32 };\n"
           "template <int WARP_M = 32, int WARPS_PER_BLOCK = 32, int kWarpTileN = 32, int WARP_ID = 32>\n"
           "__device__ void f() {}\nconstexpr int WARPSZ = 32, k_warp = 32;\n")
    assert _rules(_scan_text(tmp_path, "w.cu", src)) == [(1, "PM101"), (2, "PM101"), (3, "PM101"), (3, "PM101"),
                                                         (6, "PM101"), (6, "PM101")]


@pytest.mark.parametrize(("sarif", "why"), [("reports", "Is a directory"),
                                            ("gone/o.sarif", "No such file or directory")])
def test_a_sarif_path_that_cannot_be_written_is_named_not_its_temporary_file(tmp_path, sarif, why):
    """Was: `--sarif DIR` said `error: --sarif /tmp/.DIR.j8jpb_hk.tmp: Is a directory`, naming a temporary file."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "reports").mkdir()
    result = CliRunner().invoke(app, ["migrate", "scan", str(tmp_path / "a.py"), "--sarif", str(tmp_path / sarif)])
    assert result.exit_code == 2
    assert f"error: --sarif {tmp_path / sarif}: {why}" in result.output and ".tmp" not in result.output


def test_num_warps_taken_from_a_loop_over_literals_is_checked(tmp_path):
    """Was missed: autotune configs made in a loop or comprehension (`num_warps=w ... for w in [4, 8, 16, 32]`),
    the usual way to write a config space; reported at the literal that does not fit, once."""
    src = ("import triton\n"
           "configs = [triton.Config({'B': b}, num_warps=w) for b in (64, 128)\n"
           "           for w in [4, 8, 16, 32]]\n"
           "for nw in (2, 4):\n    configs.append(triton.Config({}, num_warps=nw))\n"
           "for nw in (8, 64):\n    configs.append(triton.Config({}, num_warps=nw))\n")
    result = _scan_text(tmp_path, "c.py", src)
    assert [(f.line, f.column, f.rule, f.message) for f in result.findings] == [
        (3, 32, "PM110", "num_warps=w takes 32: 2048 work-items on AMD (limit 1024)"),
        (6, 15, "PM110", "num_warps=nw takes 64: 4096 work-items on AMD (limit 1024)")]


def test_triton_config_space_corpus_is_scanned_exactly():
    """Were missed: a warp width as a kernel's constexpr default (`WARP: tl.constexpr = 32`), num_warps=32 held in a
    kwargs dict (`dict(num_warps=32)`, `{"num_warps": 32}`) and num_warps taken from `itertools.product` of literal
    lists. Warp tilings, dicts within 16 warps and 32 as another option stay clean."""
    names = ("pos_triton_configs.py", "neg_triton_configs.py")
    got = {(Path(f.path).name, f.line, f.rule) for f in scan_paths([CORPUS / n for n in names]).findings}
    expected = {e for e in expected_findings() if e[0] in names}
    assert got == expected, (sorted(got - expected), sorted(expected - got))


def test_kernel_defaults_dicts_and_products_are_reported_at_the_value_that_does_not_fit(tmp_path):
    src = ("import itertools\nimport triton.language as tl\n"
           "def k(x, WARP_SIZE: tl.constexpr = 32, BLOCK: tl.constexpr = 32, warp: int = 32):\n    pass\n"
           "opts = [dict(num_warps=nw) for nw, s in itertools.product((4, 32), [2, 3])]\n"
           "fast = {'num_warps': 64}\n"
           "odd = [dict(num_warps=w) for w, s in itertools.product([32], [2], [3])]\n")  # 3 lists, 2 names
    result = _scan_text(tmp_path, "k.py", src)
    assert [(f.line, f.column, f.rule, f.message) for f in result.findings] == [
        (3, 10, "PM101", "WARP_SIZE = 32 hard-codes the warp size; AMD wavefronts are 64 wide"),
        (5, 63, "PM110", "num_warps=nw takes 32: 2048 work-items on AMD (limit 1024)"),
        (6, 22, "PM110", "num_warps=64 is 4096 work-items on AMD (limit 1024)")]


def test_a_scan_that_finds_no_source_file_is_refused(tmp_path):
    """`scan DIR` of a folder holding no source file (a wrong path, sources under another suffix) printed an empty
    table and exited 0, a clean result; hipify refuses the same folder."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.txt").write_text("no code here\n")
    result = CliRunner().invoke(app, ["migrate", "scan", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"no source file under {tmp_path}" in " ".join(result.stderr.split()), result.stderr
    (tmp_path / "k.py").write_text("x = 1\n")
    assert CliRunner().invoke(app, ["migrate", "scan", str(tmp_path)]).exit_code == 0  # one file, clean


def test_columns_count_characters_not_utf8_bytes(tmp_path):
    """Both scanners gave columns in UTF-8 bytes (ast's col_offset, tree-sitter's points): after non-ASCII text on
    the line the column pointed past the finding. SARIF says which unit its columns are in."""
    python = tmp_path / "k.py"
    python.write_text('label = "ééé"; WARP_SIZE = 32\n')
    cuda = tmp_path / "k.cu"
    cuda.write_text("/* ééé */ const int WARP_SIZE = 32;\n")
    found = {f.path.rsplit("/", 1)[-1]: f for f in scan_paths([tmp_path]).findings if f.rule == "PM101"}
    assert found["k.py"].column == len('label = "ééé"; ') + 1
    assert found["k.cu"].column == len("/* ééé */ ") + 1
    assert to_sarif(scan_paths([python]))["runs"][0]["columnKind"] == "unicodeCodePoints"


def test_a_loop_variable_rebound_to_other_values_forgets_its_literals(tmp_path):
    """`for w in [4, 32]` then, later, `for w in range(n)` (or a tuple loop over something else) kept w's literals:
    `num_warps=w` in the second loop was reported at the first loop's 32."""
    kernel = tmp_path / "configs.py"
    kernel.write_text("import triton\n"
                      "sizes = [w for w in [4, 32]]\n"
                      "def configs(n, pairs):\n"
                      "    for w in range(n):\n"
                      "        yield triton.Config({}, num_warps=w)\n"
                      "    for b, w in pairs:\n"
                      "        yield triton.Config({}, num_warps=w)\n")
    assert [f for f in scan_paths([kernel]).findings if f.rule == "PM110"] == []


def test_a_loop_over_a_named_list_of_literals_reads_the_list(tmp_path):
    """`WARPS = [4, 32]` then `for w in WARPS: ... num_warps=w` was missed (the loop was over a name); reported at
    the list's 32, once. A name rebound to something else is not read."""
    kernel = tmp_path / "configs.py"
    kernel.write_text("import triton\n"
                      "WARPS = [4, 32]\n"
                      "STAGES = (2, 3)\n"
                      "configs = [triton.Config({}, num_warps=w, num_stages=s) for w in WARPS for s in STAGES]\n"
                      "more = [triton.Config({}, num_warps=w) for w in WARPS]\n")
    found = [(f.line, f.column) for f in scan_paths([kernel]).findings if f.rule == "PM110"]
    assert found == [(2, len("WARPS = [4, ") + 1)], found
    kernel.write_text("import triton\n"
                      "WARPS = [4, 32]\n"
                      "WARPS = pick()\n"
                      "configs = [triton.Config({}, num_warps=w) for w in WARPS]\n")
    assert [f for f in scan_paths([kernel]).findings if f.rule == "PM110"] == []
