"""verify: the adversarial set is rejected, correct kernels accepted; compile stage (marked compile)."""

from __future__ import annotations

from pathlib import Path

import os
import re

import pytest

from polyrec.migrate.sandbox import _make_audit
from polyrec.migrate.static import static_check
from polyrec.migrate.verify import VerifyConfig, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
REFERENCE = "migrate_ref_ops:axpy"
NUMERICS = VerifyConfig(compile=False, seeds=(0, 1))


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


@pytest.mark.parametrize("name", ["good_axpy.py", "good_axpy_fma.py"])
def test_correct_kernels_are_accepted(name):
    report = verify(HERE / name, REFERENCE, NUMERICS)
    assert report.accepted, report.failures
    assert report.stages == {"static": "pass", "numerics": "pass", "compile": "skipped: disabled"}


@pytest.mark.parametrize(("name", "stage", "why"), [
    ("adv_writes_nothing.py", "numerics", "NaN in output"),
    ("adv_returns_input.py", "numerics", "shares memory with an input"),
    ("adv_one_shape.py", "numerics", "shape (4097,)"),
    ("adv_cached.py", "numerics", "not written by any Triton launch"),  # returns a torch clone
    ("adv_reads_reference.py", "static", "import of 'migrate_ref_ops'"),
    ("adv_reads_reference_dynamic.py", "static", "import of 'sys'"),
    ("adv_torch_in_kernel.py", "static", "try/except inside kernel"),
    ("adv_escape_torch_sys.py", "static", "attribute 'sys' is not allowed"),
    ("adv_edits_reference.py", "static", "attribute 'os' is not allowed"),
    ("adv_torch_computes.py", "numerics", "already held data when a Triton launch first took it"),
    ("adv_exits.py", "numerics", "exited without results"),
])
def test_adversarial_kernels_are_rejected(name, stage, why):
    report = verify(HERE / name, REFERENCE, NUMERICS)
    assert not report.accepted
    assert report.stages[stage] == "fail"
    assert any(why in f for f in report.failures), report.failures


def test_sandbox_blocks_network_and_reference_import(tmp_path):
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text((HERE / "good_axpy.py").read_text().replace(
        "def run(x, y):", "def run(x, y):\n    torch.hub.load_state_dict_from_url('http://127.0.0.1:9/x')"))
    report = verify(sneaky, REFERENCE, NUMERICS)
    assert not report.accepted and any("reaches the network" in f for f in report.failures), report.failures


def test_static_check_names_each_problem():
    problems = static_check("import os\nimport triton\n@triton.jit\ndef k(x):\n    torch.sum(x)\n", "ref", "f")
    assert any("import of 'os'" in p for p in problems)
    assert any("torch used inside kernel k" in p for p in problems)
    assert any("no top-level run" in p for p in problems)


def test_static_check_refuses_module_reach_and_private_attributes():
    src = ("import torch\nimport triton\nfrom torch import os\n@triton.jit\ndef k(p):\n    pass\n"
           "k.run = None\ndef run(x):\n    torch.hub.load('a', 'b')\n    torch._C\n    __builtins__\n"
           "    return torch.load('f')\n")
    problems = static_check(src, "ref", "f")
    for why in ("torch.os is the module 'os'", "assigning to k.run", "torch.hub (torch.hub)", "'_C'",
                "'__builtins__'", "torch.load"):
        assert any(why in p for p in problems), (why, problems)


def test_sandbox_audit_blocks_writes_outside_its_folder_and_processes(tmp_path):
    audit = _make_audit(frozenset(), (str(tmp_path),))
    audit("open", (str(tmp_path / "out.pt"), "wb", 0))  # its own folder
    audit("open", ("/etc/hostname", "r", 0))  # reading is fine
    for event, args in [("open", (str(HERE / "migrate_ref_ops.py"), "a", 0)),
                        ("open", (str(HERE / "migrate_ref_ops.py"), None, os.O_WRONLY | os.O_APPEND)),
                        ("os.rename", (str(tmp_path / "x"), str(HERE / "migrate_ref_ops.py"), None, None)),
                        ("os.remove", (str(HERE / "migrate_ref_ops.py"), None)),
                        ("subprocess.Popen", (None, ["/bin/sh", "-c", "id"], None, None)),
                        ("socket.connect", (None, ("127.0.0.1", 9)))]:
        with pytest.raises(PermissionError):
            audit(event, args)


def test_zero_seeds_is_refused():
    with pytest.raises(ValueError, match="at least one seed"):
        verify(HERE / "adv_cached.py", REFERENCE, VerifyConfig(compile=False, seeds=()))


def _amd_specs_present() -> bool:
    from polyrec.hardware import catalog

    return {"MI300X", "MI350X"} <= set(catalog())


@pytest.mark.compile
def test_compile_stage_accepts_portable_kernel_for_three_targets():
    if not _amd_specs_present():
        pytest.skip("MI300X / MI350X device specs not in the catalog yet")
    report = verify(HERE / "good_axpy.py", REFERENCE, VerifyConfig(seeds=(0,)))
    assert report.accepted, report.failures
    assert {r["device"] for r in report.compile_reports} == {"H200", "MI300X", "MI350X"}
    assert {r["target"] for r in report.compile_reports} == {"cuda:90", "hip:gfx942", "hip:gfx950"}


@pytest.mark.compile
@pytest.mark.parametrize(("name", "reference", "why"), [
    ("adv_num_warps_32.py", REFERENCE, "threads > 1024 per block on MI300X"),
    ("adv_compile_dodge.py", "migrate_ref_mm:mm", "MI300X"),  # big tiles ran; they are what gets compiled
])
def test_compile_stage_rejects(name, reference, why, monkeypatch):
    if not _amd_specs_present():
        pytest.skip("MI300X / MI350X device specs not in the catalog yet")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # numerics through the interpreter, as on the CPU machine
    report = verify(HERE / name, reference, VerifyConfig(seeds=(0,)))
    assert not report.accepted and report.stages["compile"] == "fail", report.failures
    assert any(why in f for f in report.failures), report.failures


def test_static_check_refuses_modules_held_in_names():
    src = ("import torch\nimport triton\nimport triton.language as tl\n@triton.jit\ndef k(p):\n    pass\n"
           "def run(x, lib=tl):\n    t = torch\n    u = torch.utils\n    t.load('f')\n"
           "    u.cpp_extension.load('m', [])\n    [torch][0].load('f')\n    return x\n")
    problems = static_check(src, "ref", "f")
    for line, module in ((7, "triton.language"), (8, "torch"), (9, "torch.utils"), (12, "torch")):
        assert any(p.startswith(f"line {line}: the module {module} ") for p in problems), (line, problems)


def test_candidates_get_their_own_triton_cache(tmp_path, monkeypatch):
    import torch

    from polyrec.migrate.verify import run_sandboxed

    shared = tmp_path / "shared-triton-cache"  # the caller's cache, which other candidates' kernels use
    shared.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    poison = shared / "poisoned.json"
    candidate = tmp_path / "poisoner.py"
    candidate.write_text("import triton\n"
                         "OWN = triton.knobs.cache.dir\n"
                         f"def run(*inputs):\n    open({str(poison)!r}, 'w').write(OWN)\n")
    work = tmp_path / "work"
    work.mkdir()
    torch.save([()], work / "cases.pt")
    error = run_sandboxed("run", candidate, work / "cases.pt", work / "out.pt", "", NUMERICS, interpret=True)
    assert error is not None and "PermissionError" in error and not poison.exists(), error
    candidate.write_text("import triton\n"
                         f"def run(*inputs):\n    open({str(work / 'cache_dir.txt')!r}, 'w').write("
                         "triton.knobs.cache.dir)\n    return None\n")
    run_sandboxed("run", candidate, work / "cases.pt", work / "out.pt", "", NUMERICS, interpret=True)
    own = Path((work / "cache_dir.txt").read_text())
    assert own.parent == work and own != shared


def test_the_run_stage_is_the_interpreter_on_the_cpu_even_where_a_gpu_is(tmp_path, monkeypatch):
    """A GPU run inside the sandbox needs new processes (ldconfig, the C compiler for Triton's launcher)
    that it refuses, so the numerics run in the interpreter with the GPUs hidden from the child, on a
    host with a GPU too."""
    import torch

    from polyrec.migrate import verify

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    seen = {}

    def record(mode, *args, interpret, **kw):
        seen[mode] = interpret
        return "stopped by the test"

    monkeypatch.setattr(verify, "run_sandboxed", record)
    report = verify.verify(HERE / "good_axpy.py", REFERENCE, NUMERICS)
    assert seen == {"run": True} and "numerics: stopped by the test" in report.failures
    env = verify._sandbox_env(True)
    assert env["TRITON_INTERPRET"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "" and env["HIP_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize(("reference", "says"), [
    ("migrate_ref_ops.py:axpy", "MODULE is a module name as `import` takes it (migrate_ref_ops:axpy), not a file"),
    ("./migrate_ref_ops:axpy", "MODULE is a module name as `import` takes it (migrate_ref_ops:axpy), not a file"),
    ("sub/migrate_ref_ops.py:axpy", "(sub.migrate_ref_ops:axpy), not a file"),
    ("no_such_module:axpy", "reference 'no_such_module:axpy': importing no_such_module failed: "
                            "ModuleNotFoundError: No module named 'no_such_module'"),
])
def test_a_reference_given_as_a_file_path_says_to_give_the_module_name(reference, says):
    """Was: `--reference myref.py:f` said "No module named 'myref.py'; 'myref' is not a package" and `./myref:f`
    "the 'package' argument is required to perform a relative import", and neither named the reference."""
    from polyrec.migrate.verify import load_reference

    with pytest.raises(ValueError, match=re.escape(says)):
        load_reference(reference)
