"""The static stage refuses, at its line, a kernel's call of a triton.language builtin through a name bound at import
(``from triton.language import dot``, a module-level ``mm = tl.dot``): Triton 3.6's CPU interpreter, which runs the
numerics stage, patches only the attributes of triton.language, so such a call fails there with "Did you forget to
add @triton.jit ?" though a GPU compiles it. It refuses, at its line, a kernel's variable bound to a function
(``d = tl.dot`` in a kernel), which the interpreter runs but a GPU compile refuses, and warns of a kernel's call of
``triton.language.extra`` (``libdevice.exp``), which a GPU compiles but the interpreter cannot run. Every form below
is also run under TRITON_INTERPRET=1, each in a fresh process: the check refuses only calls the interpreter cannot
run, and all of them but the forms in UNCAUGHT; the compile-only pass compiles them."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compile_util import COMPILE_DEVICES, compile_only

from polyrec.migrate.port import SYSTEM_PROMPT, port
from polyrec.migrate.providers import RecordedTranscriptProvider
from polyrec.migrate.interpreter_checks import interpreter_warnings
from polyrec.migrate.static import static_check
from polyrec.migrate.verify import VerifyConfig, verify

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
BARE = HERE / "good_mm_default_precision.py"
REFERENCE = "migrate_ref_mm:mm"
NUMERICS = VerifyConfig(compile=False, seeds=(0,))
MARK = "  # refused"  # ends the line of each call the check must refuse as bound at import
HELD = "  # function held"  # ends the line of each kernel variable the check must refuse as holding a function
EXTRA = "  # extra"  # ends the line of each call the check must warn of as triton.language.extra
ARG = "  # builtin passed"  # ends the line of each call the check must refuse as passing a builtin to a jitted function
#: A kernel y = f(x) on 16 floats; {header} holds imports and module-level lines, {body} computes y from x.
TEMPLATE = """import torch
import triton
{header}


@triton.jit
def k(xp, yp):
    r = triton.language.arange(0, 16)
    x = triton.language.load(xp + r)
    {body}
    triton.language.store(yp + r, y)


def go():
    x = torch.rand(16)
    y = torch.empty(16)
    k[(1,)](x, y)
"""
COMBINE = "\n\n@triton.jit\ndef comb(a, b):\n    return a + b"
APPLY = "\n\n@triton.jit\ndef apply(f, a, b):\n    return f(a, b)"
#: name -> (header, body). Those with a MARK fail in the interpreter; the others run.
FORMS = {
    "tl.exp": ("import triton.language as tl", "y = tl.exp(x)"),
    "lang.exp": ("import triton.language as lang", "y = lang.exp(x)"),
    "from triton import language": ("from triton import language as tl", "y = tl.exp(x)"),
    "triton.language.exp": ("", "y = triton.language.exp(x)"),
    "tl.math.exp": ("import triton.language as tl", "y = tl.math.exp(x)"),
    "math module named": ("from triton.language import math as tmath", "y = tmath.exp(x)"),
    "core module named": ("import triton.language.core as core", "y = core.maximum(x, 0.5)"),
    "core module imported": ("from triton.language import core", "y = core.maximum(x, 0.5)"),
    "kernel's own alias": ("import triton.language as tl", "e = tl.exp" + HELD + "\n    y = e(x)"),
    "kernel's own name hides": ("import triton.language as tl\nfrom triton.language import exp",
                                "exp = tl.exp" + HELD + "\n    y = exp(x)"),
    "kernel's alias of tl.dot": ("import triton.language as tl", "d = tl.dot" + HELD + "\n    y = tl.sum(d(x[:, None] "
                                 "* x[None, :], x[:, None] * x[None, :], input_precision='ieee'), axis=1)"),
    "kernel's unused alias": ("import triton.language as tl", "d = tl.dot" + HELD + "\n    y = x"),
    "kernel's alias of its alias": ("import triton.language as tl", "e = tl.exp" + HELD + "\n    f = e" + HELD +
                                    "\n    y = f(x)"),
    "kernel's alias of tl.sum": ("import triton.language as tl", "s = tl.sum" + HELD + "\n    y = x + s(x, axis=0)"),
    "kernel's alias of a helper": ("import triton.language as tl" + COMBINE, "c = comb" + HELD + "\n    y = c(x, x)"),
    "kernel's alias of a module alias of tl.sum": ("import triton.language as tl\ns = tl.sum",
                                                  "t = s" + HELD + "\n    y = x + t(x, axis=0)"),
    "kernel's alias of a module alias of a helper": ("import triton.language as tl" + COMBINE + "\nc = comb",
                                                    "d = c" + HELD + "\n    y = d(x, x)"),
    "kernel's tuple of builtins": ("import triton.language as tl",
                                   "ops = (tl.maximum, tl.minimum)" + HELD + "\n    y = ops[0](x, 0.5)"),
    "kernel's tuple of helpers": ("import triton.language as tl" + COMBINE, "ops = (comb,)" + HELD + "\n    y = ops[0](x, x)"),
    "builtin passed to a helper": ("import triton.language as tl" + APPLY, "y = apply(tl.maximum, x, 0.5)" + ARG),
    "tl.dot passed to a helper": ("import triton.language as tl" + APPLY, "y = tl.sum(apply(tl.dot, x[:, None] * "
                                  "x[None, :], x[:, None] * x[None, :]), axis=1)" + ARG),
    "jitted function passed to a helper": ("import triton.language as tl" + COMBINE + APPLY, "y = apply(comb, x, x)"),
    "kernel's dtype variable": ("import triton.language as tl", "f = tl.float32\n    y = x.to(f)"),
    "tl.dot": ("import triton.language as tl",
               "y = tl.sum(tl.dot(x[:, None] * x[None, :], x[:, None] * x[None, :], input_precision='ieee'), axis=1)"),
    "libdevice": ("from triton.language.extra import libdevice", "y = libdevice.exp(x)" + EXTRA),
    "libdevice through tl": ("import triton.language as tl", "y = tl.extra.libdevice.exp(x)" + EXTRA),
    "libdevice imported": ("from triton.language.extra.libdevice import tanh", "y = tanh(x)" + EXTRA),
    "jit function imported": ("from triton.language import sum as tsum", "y = x + tsum(x, axis=0)"),
    "jit function aliased": ("import triton.language as tl\ns = tl.sum", "y = x + s(x, axis=0)"),
    "cdiv imported": ("from triton.language import cdiv", "y = x + cdiv(7, 2)"),
    "dtype imported": ("from triton.language import float32", "y = x.to(float32)"),
    "alias not called": ("import triton.language as tl\ne = tl.exp", "y = tl.exp(x)"),
    "alias rebound by a def": ("import triton.language as tl\nm = tl.maximum\n\n@triton.jit\ndef m(a, b):\n"
                               "    return tl.maximum(a, b)", "y = m(x, 0.5)"),
    "alias rebound through global": ("import triton.language as tl\nm = tl.maximum\n\n@triton.jit\ndef h(a, b):\n"
                                     "    return tl.maximum(a, b)\n\ndef rebind():\n    global m\n    m = h\n\n"
                                     "rebind()", "y = m(x, 0.5)"),
    "imported": ("from triton.language import exp", "y = exp(x)" + MARK),
    "imported, renamed": ("import triton.language as tl\nfrom triton.language import maximum as mx",
                          "y = mx(x, 0.5)" + MARK),
    "imported load": ("from triton.language import load", "y = load(xp + r)" + MARK),
    "assigned": ("import triton.language as tl\ne = tl.exp", "y = e(x)" + MARK),
    "assigned twice": ("import triton.language as tl\ne = tl.exp\nf = e", "y = f(x)" + MARK),
    "unpacked": ("import triton.language as tl\ne, lg = tl.exp, tl.log", "y = e(x)" + MARK),
    "annotated": ("import triton.language as tl\ne: object = tl.exp", "y = e(x)" + MARK),
    "from math": ("from triton.language.math import exp", "y = exp(x)" + MARK),
    "from core": ("from triton.language.core import maximum", "y = maximum(x, 0.5)" + MARK),
    "assigned from core": ("import triton.language as tl\nm = triton.language.core.maximum", "y = m(x, 0.5)" + MARK),
    "kernel's alias of an import": ("from triton.language import maximum",
                                    "m = maximum" + HELD + "\n    y = m(x, 0.5)" + MARK),
    "imported, after tl.sum": ("import triton.language as tl\nfrom triton.language import maximum",
                               "s = tl.sum(x, axis=0)\n    y = maximum(x, s)" + MARK),
    "tl.core": ("import triton.language as tl", "y = tl.core.maximum(x, 0.5)"),
    "triton.language.core": ("", "y = triton.language.core.maximum(x, 0.5)"),
    "kernel's alias of tl.core": ("import triton.language as tl", "m = tl.core.maximum" + HELD + "\n    y = m(x, 0.5)"),
    "tl.core, after tl.sum": ("import triton.language as tl", "s = tl.sum(x, axis=0)\n    y = tl.core.maximum(x, s)"),
    "tuple of builtins": ("import triton.language as tl\nfns = (tl.exp,)", "y = fns[0](x)"),
    "in a jitted helper": ("import triton.language as tl\ne = tl.exp\n\n@triton.jit\ndef h(v):\n"
                           "    return e(v)" + MARK, "y = h(x)"),
    "range": ("from triton.language import range as trange",
              "y = x\n    for i in trange(2):" + MARK + "\n        y = y + 1.0"),
    "static_range": ("from triton.language import static_range",
                     "y = x\n    for i in static_range(2):" + MARK + "\n        y = y + 1.0"),
    "reduce": ("from triton.language import reduce" + COMBINE, "y = x + reduce(x, 0, comb)" + MARK),
    "multiple_of": ("from triton.language import multiple_of", "o = multiple_of(r, 16)" + MARK + "\n    y = x + o"),
}
#: Forms the interpreter cannot run alone that are not refused as bound at import: triton.language.core reached while
#: the kernel runs (it runs once a launch has called a jitted triton.language function such as tl.sum, whose call
#: patches triton.language.core for good: "tl.core, after tl.sum"; a kernel's alias of it is refused as a function
#: held), a builtin held in a container, and triton.language.extra, which is warned of.
UNCAUGHT = {"tl.core", "triton.language.core", "kernel's alias of tl.core", "tuple of builtins", "libdevice",
            "libdevice through tl", "libdevice imported"}
#: Runs go() of each file named on the command line under the interpreter, each in a forked child (a launch can
#: leave triton.language.core patched: the forms must not see each other's); prints {file: error or null}.
RUNNER = """import importlib.util, json, os, sys
import torch, triton
errors = {}
for path in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[1][:-3], path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            module.go()
            error = None
        except Exception as exc:
            error = repr(exc)
        with os.fdopen(write, "w") as pipe:
            pipe.write(json.dumps(error))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        errors[path] = json.loads(pipe.read())
    os.wait()
print(json.dumps(errors))
"""


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict[str, str | None]:
    """Form name -> the error its kernel raised under TRITON_INTERPRET=1 (None: it ran), all in one child."""
    folder = tmp_path_factory.mktemp("forms")
    paths = {}
    for i, (name, (header, body)) in enumerate(FORMS.items()):
        paths[name] = folder / f"form_{i}.py"
        paths[name].write_text(TEMPLATE.format(header=header, body=body))
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", RUNNER, *map(str, paths.values())], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    errors = json.loads(done.stdout.splitlines()[-1])
    return {name: errors[str(path)] for name, path in paths.items()}


def _refused_lines(source: str, says: str = "as bound at import") -> list[str]:
    """The 'line N' of each problem static_check names that ``says`` so."""
    return [p.split(":")[0] for p in static_check(source, "ref", "f") if says in p]


def _marked_lines(source: str, mark: str) -> list[str]:
    return [f"line {i}" for i, text in enumerate(source.splitlines(), start=1) if text.endswith(mark)]


@pytest.mark.parametrize("form", list(FORMS))
def test_the_check_refuses_exactly_the_calls_the_interpreter_cannot_run(form, interpreted):
    source = TEMPLATE.format(header=FORMS[form][0], body=FORMS[form][1])
    marked = _marked_lines(source, MARK)
    assert _refused_lines(source) == marked, source
    assert _refused_lines(source, "holds a function in a variable") == _marked_lines(source, HELD), source
    assert [w.split(":")[0] for w in interpreter_warnings(source)] == _marked_lines(source, EXTRA), source
    assert _refused_lines(source, "given to a jitted function") == _marked_lines(source, ARG), source
    assert (interpreted[form] is None) == (not marked and form not in UNCAUGHT), interpreted[form]
    if marked:
        assert "Did you forget to add @triton.jit" in interpreted[form] or "range" in form, interpreted[form]
    if EXTRA in FORMS[form][1]:
        assert "cannot convert None" in interpreted[form], interpreted[form]


def _compile_form(form: str, path: Path) -> None:
    """Compile the form's kernel for sm_90, gfx942 and gfx950 (raises where one does not compile)."""
    from polyrec.hardware.catalog import get_device
    from polyrec.hardware.compile import CompileJob, compile_job

    path.write_text(TEMPLATE.format(header=FORMS[form][0], body=FORMS[form][1]))
    spec = importlib.util.spec_from_file_location(f"compiled_form_{list(FORMS).index(form)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    job = CompileJob(label=form, kernel=module.k, signature={"xp": "*fp32", "yp": "*fp32"})
    for device in COMPILE_DEVICES:
        compile_job(job, get_device(device))


@compile_only
@pytest.mark.parametrize("form", [form for form, (header, body) in FORMS.items() if HELD not in header + body and (
    MARK in header + body or EXTRA in body or form in ("tl.dot", "kernel's dtype variable",
                                                       "jitted function passed to a helper"))])
def test_a_gpu_compiles_each_form_the_interpreter_cannot_run(form, tmp_path):
    """What the check refuses as bound at import, or warns of as triton.language.extra, is no GPU problem: each
    form compiles for sm_90, gfx942 and gfx950; so do tl.dot called directly, a kernel's dtype variable and a jitted
    function passed to a helper."""
    _compile_form(form, tmp_path / "form.py")


@compile_only
@pytest.mark.parametrize("form", [form for form, (header, body) in FORMS.items() if HELD in body])
def test_a_gpu_refuses_each_function_held_in_a_kernel_variable(form, tmp_path):
    """What the check refuses as a function held in a kernel's variable does not compile, called or not."""
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError, match="to tensor|has no attribute .type."):  # a tuple of builtins: the latter
        _compile_form(form, tmp_path / "form.py")


@compile_only
@pytest.mark.parametrize("form", [form for form, (header, body) in FORMS.items() if ARG in body])
def test_a_gpu_refuses_each_builtin_passed_to_a_jitted_function(form, tmp_path):
    """What the check refuses as a builtin passed to a jitted function does not compile (a jitted one does)."""
    from triton.compiler.errors import CompilationError

    with pytest.raises(CompilationError, match="has no attribute 'type'"):
        _compile_form(form, tmp_path / "form.py")


def test_the_message_names_the_call_the_kernel_and_the_fix():
    source = TEMPLATE.format(header="import triton.language as tl\nfrom triton.language import maximum as mx",
                             body="y = mx(x, 0.5)")
    [problem] = [p for p in static_check(source, "ref", "f") if "as bound at import" in p]
    line = next(i for i, text in enumerate(source.splitlines(), start=1) if "mx(x" in text)
    assert problem.startswith(f"line {line}: mx in kernel k is triton.language.maximum as bound at import "), problem
    for says in ("call triton.language builtins as tl.maximum", "CPU interpreter", "patches only the attributes",
                 "Did you forget to add @triton.jit ?",
                 "a GPU compiles such a call through a module-level name"):
        assert says in problem, (says, problem)


def _alias_candidate(tmp_path: Path, header: str, call: str) -> tuple[Path, int]:
    """The bare-dot matmul port with ``header`` after its imports and its tl.dot called as ``call``; (file, line
    of the call)."""
    source = BARE.read_text().replace("tl.dot(x, y)", f"{call}(x, y, allow_tf32=False)")
    source = source.replace("\n\n\n@triton.jit", f"\n{header}\n\n\n@triton.jit")
    candidate = tmp_path / "mm_alias.py"
    candidate.write_text(source)
    return candidate, next(i for i, text in enumerate(source.splitlines(), start=1) if f"{call}(x, y" in text)


@pytest.mark.parametrize(("header", "call"), [("matmul = tl.dot", "matmul"),
                                              ("from triton.language import dot", "dot")])
def test_verify_refuses_an_aliased_dot_before_the_numerics_stage(tmp_path, header, call):
    candidate, line = _alias_candidate(tmp_path, header, call)
    report = verify(candidate, REFERENCE, NUMERICS)
    assert not report.accepted and report.stages == {"static": "fail"}, report.stages
    assert [f.split(": call")[0] for f in report.failures] == [
        f"static: line {line}: {call} in kernel mm_kernel is triton.language.dot as bound at import (a from-import "
        "or a module-level alias)"], report.failures
    assert "as tl.dot" in report.failures[0]


def test_verify_accepts_triton_language_under_another_name(tmp_path):
    candidate, _ = _alias_candidate(tmp_path, "import triton.language as lang", "lang.dot")
    report = verify(candidate, REFERENCE, NUMERICS)
    assert report.accepted and report.stages["numerics"] == "pass", report.failures


def _bare_candidate(tmp_path: Path, before: str, call: str) -> tuple[Path, int]:
    """The bare-dot matmul port with ``before`` as the first line of its kernel and ``acc += {call}``; (file, line of
    ``before``, or of the call where ``before`` is empty)."""
    source = BARE.read_text().replace("acc += tl.dot(x, y)", f"acc += {call}")
    source = source.replace("    rm = tl.program_id(0)", f"    {before}\n    rm = tl.program_id(0)" if before
                            else "    rm = tl.program_id(0)")
    candidate = tmp_path / "mm_local.py"
    candidate.write_text(source)
    looked_for = before or f"acc += {call}"
    return candidate, next(i for i, text in enumerate(source.splitlines(), start=1) if looked_for in text)


def test_verify_refuses_a_kernel_variable_holding_tl_dot(tmp_path):
    candidate, line = _bare_candidate(tmp_path, "d = tl.dot", "d(x, y, input_precision=\"ieee\")")
    report = verify(candidate, REFERENCE, NUMERICS)
    assert not report.accepted and report.stages == {"static": "fail"}, report.stages
    assert report.failures == [
        f"static: line {line}: d = tl.dot in kernel mm_kernel holds a function in a variable, which a kernel cannot: "
        "the GPU compile refuses the assignment (\"cannot convert <function ...> to tensor\", though the CPU "
        "interpreter of the numerics stage runs it); call tl.dot directly (call triton.language builtins as tl.NAME "
        "inside kernels)"], report.failures


def test_verify_warns_that_libdevice_cannot_run_in_the_interpreter(tmp_path):
    candidate, line = _bare_candidate(tmp_path, "", "tl.dot(x, y, input_precision=\"ieee\") * "
                                      "tl.extra.libdevice.exp(0.0 * acc)")
    report = verify(candidate, REFERENCE, NUMERICS)
    assert not report.accepted and report.stages["numerics"] == "fail", report.stages
    assert any("'NoneType' object has no attribute" in f for f in report.failures), report.failures
    assert report.warnings == [
        f"static: line {line}: tl.extra.libdevice.exp in kernel mm_kernel is triton.language.extra.libdevice.exp, "
        "which the CPU interpreter of the numerics stage cannot run (Triton 3.6 has no interpreter version of "
        "triton.language.extra: the call returns None and the run fails, with \"cannot convert None ... to tensor\" "
        "or \"'NoneType' object has no attribute\"), so the port cannot pass verify; use tl.exp (tl.math.exp)"], \
        report.warnings


def test_a_libdevice_function_without_a_tl_equivalent_says_so():
    source = TEMPLATE.format(header=FORMS["libdevice imported"][0], body=FORMS["libdevice imported"][1])
    [warning] = interpreter_warnings(source)
    assert "tanh in kernel k is triton.language.extra.libdevice.tanh" in warning, warning
    assert warning.endswith("Triton 3.6 has no tl.math.tanh: compute it from tl functions (tl.exp, tl.log, "
                            "tl.where...)"), warning


def test_the_port_loop_feeds_the_refusal_back(tmp_path):
    candidate, line = _alias_candidate(tmp_path, "matmul = tl.dot", "matmul")
    provider = RecordedTranscriptProvider(replies=[f"```python\n{candidate.read_text()}```\n"] * 2)
    kernel = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
    report = port(kernel, REFERENCE, provider, work_dir=tmp_path / "out", rounds=2, config=NUMERICS)
    feedback = provider.calls[1][-1]["content"]
    assert not report.accepted
    assert f"- static: line {line}: matmul in kernel mm_kernel is triton.language.dot as bound at import" in feedback, \
        feedback
    assert "call triton.language builtins as tl.dot" in feedback


def test_the_port_prompt_asks_for_tl_attributes():
    assert "call triton.language functions as tl.NAME" in SYSTEM_PROMPT
    assert "from triton.language import" in SYSTEM_PROMPT and "mm = tl.dot" in SYSTEM_PROMPT
    assert "never\n  hold a function in a kernel's variable (`d = tl.dot` in a kernel" in SYSTEM_PROMPT
    assert "not triton.language.extra.libdevice" in SYSTEM_PROMPT


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="launches a kernel in the interpreter")
def test_the_answer_does_not_depend_on_an_earlier_launch():
    """An interpreted launch of a jitted triton.language function (tl.sum) leaves triton.language.core holding the
    interpreter's versions; a core import is refused all the same (it was not, after such a launch in the process)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def total(xp, yp):
        r = tl.arange(0, 16)
        tl.store(yp, tl.sum(tl.load(xp + r), axis=0))

    total[(1,)](torch.rand(16), torch.empty(1))
    for form in ("from core", "assigned from core"):
        source = TEMPLATE.format(header=FORMS[form][0], body=FORMS[form][1])
        assert _refused_lines(source) == [f"line {i}" for i, text in enumerate(source.splitlines(), start=1)
                                          if text.endswith(MARK)], form
