"""verify warns of a tl.dot left at Triton's default precision (TF32 on sm_90 and gfx942), which the CPU
interpreter of the numerics stage does not model, without rejecting the candidate."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate.port import port
from polyrec.migrate.providers import RecordedTranscriptProvider
from polyrec.migrate.static import precision_warnings
from polyrec.migrate.verify import VerifyConfig, VerifyReport, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
BARE = HERE / "good_mm_default_precision.py"
REFERENCE = "migrate_ref_mm:mm"
NUMERICS = VerifyConfig(compile=False, seeds=(0,))
KERNEL = "import triton\n{imports}\n@triton.jit\ndef k(a, b, c):\n    r = {lang}.arange(0, 16)\n    x = {dot}\n"


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def _dot_line(source: str, marker: str = "tl.dot(") -> int:
    return next(i for i, text in enumerate(source.splitlines(), start=1) if marker in text)


def test_a_bare_dot_is_warned_at_its_line_and_the_candidate_still_accepted():
    report = verify(BARE, REFERENCE, NUMERICS)
    assert report.accepted, report.failures
    assert report.stages == {"static": "pass", "numerics": "pass", "compile": "skipped: disabled"}
    assert len(report.warnings) == 1, report.warnings
    warning = report.warnings[0]
    assert warning.startswith(f"static: line {_dot_line(BARE.read_text())}: tl.dot passes neither"), warning
    for says in ("TF32", "NVIDIA", "gfx942", "gfx950", "interpreter", 'input_precision="ieee"', "allow_tf32=True"):
        assert says in warning, (says, warning)
    assert report.as_dict()["warnings"] == report.warnings


@pytest.mark.parametrize("call", ['tl.dot(x, y, input_precision="ieee")', "tl.dot(x, y, allow_tf32=False)",
                                  'tl.dot(x, y, None, "tf32x3")', "tl.dot(x, y, allow_tf32=True)",
                                  "tl.dot(x, y, **PRECISION)"])
def test_a_dot_that_states_its_precision_is_not_warned(call):
    source = BARE.read_text().replace("tl.dot(x, y)", call)
    assert call in source and precision_warnings(source) == []


def test_an_ieee_candidate_is_accepted_without_warnings(tmp_path):
    candidate = tmp_path / "mm_ieee.py"
    candidate.write_text(BARE.read_text().replace("tl.dot(x, y)", 'tl.dot(x, y, input_precision="ieee")'))
    report = verify(candidate, REFERENCE, NUMERICS)
    assert report.accepted and report.warnings == [] and report.as_dict()["warnings"] == [], report.failures


@pytest.mark.parametrize(("imports", "lang", "dot"), [
    ("import triton.language as lang", "lang", "lang.dot(r[:, None] + r[None, :], r[:, None] * r[None, :])"),
    ("from triton import language as tl", "tl", "tl.dot(r[:, None] + r[None, :], r[:, None] * r[None, :])"),
    ("from triton.language import arange, dot as mm\nimport triton.language as tl", "tl",
     "mm(r[:, None] + r[None, :], r[:, None] * r[None, :])"),
    ("import triton.language as tl", "tl",
     "triton.language.dot(r[:, None] + r[None, :], r[:, None] * r[None, :], input_precision=None)"),
])
def test_dot_is_found_however_triton_language_is_named(imports, lang, dot):
    source = KERNEL.format(imports=imports, lang=lang, dot=dot)
    warnings = precision_warnings(source)
    assert [w.split(":")[0] for w in warnings] == [f"line {_dot_line(source, 'x = ')}"], (source, warnings)


#: (imports and module-level lines, name of triton.language for tl.arange, the dot called with operands ARGS)
ALIASES = {
    "assigned": ("import triton.language as tl\nmm = tl.dot", "tl", "mm(ARGS)"),
    "assigned twice": ("import triton.language as tl\nmm = tl.dot\nmatmul = mm", "tl", "matmul(ARGS)"),
    "assigned from triton": ("mm = triton.language.dot\nimport triton.language as tl", "tl", "mm(ARGS)"),
    "imported": ("from triton.language import dot", "triton.language", "dot(ARGS)"),
    "imported, assigned": ("from triton.language import dot\nmm = dot", "triton.language", "mm(ARGS)"),
    "module renamed": ("import triton.language as tlang", "tlang", "tlang.dot(ARGS)"),
    "unpacked": ("import triton.language as tl\nmm, add = tl.dot, tl.add", "tl", "mm(ARGS)"),
    "annotated": ("import triton.language as tl\nmm: object = tl.dot", "tl", "mm(ARGS)"),
}
OPERANDS = "r[:, None] + r[None, :], r[:, None] * r[None, :]"


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_a_dot_reached_through_an_alias_is_warned(alias):
    imports, lang, dot = ALIASES[alias]
    source = KERNEL.format(imports=imports, lang=lang, dot=dot.replace("ARGS", OPERANDS))
    warnings = precision_warnings(source)
    assert [w.split(":")[0] for w in warnings] == [f"line {_dot_line(source, 'x = ')}"], (source, warnings)


@pytest.mark.parametrize("precision", ['input_precision="ieee"', "allow_tf32=False", 'None, "ieee"'])
@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_a_dot_reached_through_an_alias_that_states_its_precision_is_not_warned(alias, precision):
    imports, lang, dot = ALIASES[alias]
    source = KERNEL.format(imports=imports, lang=lang, dot=dot.replace("ARGS", f"{OPERANDS}, {precision}"))
    assert precision_warnings(source) == [], source


def test_alias_names_are_resolved_per_scope():
    """A kernel's parameters and own names hide the module's; a name bound in another function is not seen; a
    kernel's own alias is followed (Triton's compiler refuses ``d = tl.dot`` in a kernel, its interpreter runs it)."""
    source = ("import triton\nimport triton.language as tl\nmm = tl.dot\n\n"
              "def helper():\n    dot2 = tl.dot\n\n"
              "@triton.jit\ndef k(a, b, mm: tl.constexpr):\n    x = mm(a, b)\n    y = dot2(a, b)\n\n"
              "@triton.jit\ndef k2(a, b):\n    mm = tl.maximum\n    x = mm(a, b)\n\n"
              "@triton.jit\ndef k3(a, b):\n    x = mm(a, b)\n\n"  # the module's mm
              "@triton.jit\ndef k4(a, b):\n    d = tl.dot\n    x = d(a, b)\n"  # its own
              "@triton.jit\ndef k5(a, b):\n    d = tl.dot\n    x = d(a, b, allow_tf32=False)\n")
    warned = [w.split(":")[0] for w in precision_warnings(source)]
    assert warned == [f"line {_dot_line(source, 'def k3') + 1}", f"line {_dot_line(source, 'def k4') + 2}"], warned


def test_a_candidate_calling_a_module_level_alias_is_refused_and_warned(tmp_path):
    """Triton 3.6 compiles such a kernel (the global is tl.dot: TF32 on sm_90 and gfx942), but its interpreter
    patches only the attributes of triton.language, so the static stage refuses the call before the numerics stage
    would fail on it (tests/test_migrate_verify_interp.py); the warning names the precision problem as well."""
    candidate = tmp_path / "mm_alias.py"
    source = BARE.read_text().replace("tl.dot(x, y)", "matmul(x, y)")
    source = source.replace("\n\n\n@triton.jit", "\nmatmul = tl.dot\n\n\n@triton.jit")
    candidate.write_text(source)
    report = verify(candidate, REFERENCE, NUMERICS)
    line = _dot_line(source, "matmul(x, y)")
    assert report.stages == {"static": "fail"}, report.failures
    assert [f.split(" in kernel")[0] for f in report.failures] == [f"static: line {line}: matmul"], report.failures
    assert [w.split(": tl.dot")[0] for w in report.warnings] == [f"static: line {line}"], report.warnings


def test_a_dot_that_is_not_triton_or_not_in_a_kernel_is_not_warned():
    source = ("import torch\nimport triton\nimport triton.language as tl\n\n"
              "def dot(a, b):\n    return tl.dot(a, b)\n\n"  # not jitted: never compiled
              "@triton.jit\ndef k(a):\n    x = dot(a, a)\n    y = tl.dot_scaled\n")
    assert precision_warnings(source) == []


def test_the_cli_prints_warnings_of_an_accepted_candidate(monkeypatch):
    from polyrec.migrate import verify as verify_module

    report = VerifyReport(candidate=str(BARE), accepted=True, stages={"static": "pass"},
                          warnings=["static: line 15: tl.dot passes neither [input_precision]"])
    monkeypatch.setattr(verify_module, "verify", lambda *args, **kwargs: report)
    result = CliRunner().invoke(app, ["migrate", "verify", str(BARE), "--reference", REFERENCE, "--no-compile"])
    assert result.exit_code == 0, result.output
    assert "ACCEPTED" in result.stdout and "warning: static: line 15: tl.dot passes neither [input_precision]" in \
        " ".join(result.stdout.split())


def test_the_port_loop_feeds_warnings_back_as_advice(tmp_path):
    rejected = "import os\n" + BARE.read_text()  # refused by the static stage, the dot warned of
    provider = RecordedTranscriptProvider(replies=[f"```python\n{rejected}```\n"] * 2)
    kernel = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
    report = port(kernel, REFERENCE, provider, work_dir=tmp_path, rounds=2, config=NUMERICS)
    feedback = provider.calls[1][-1]["content"]
    assert not report.accepted and "import of 'os'" in feedback
    assert f"Warnings (advice; they do not fail verification):\n- static: line {_dot_line(rejected)}: tl.dot" in \
        feedback, feedback
