"""PM110 through one level of wrapper: a function that passes a parameter on as a launch's num_warps is read at its
default and at its calls in the same file (literals, loop variables over literals)."""

from __future__ import annotations

from polyrec.migrate.scan_python import scan_python

KERNEL = "import triton\n@triton.jit\ndef kernel(x):\n    pass\n"  # lines 1-4


def _pm110(source: str) -> list[tuple[int, int, str]]:
    return [(f.line, f.column, f.message) for f in scan_python("w.py", KERNEL + source) if f.rule == "PM110"]


def test_a_wrapper_s_default_and_call_site_num_warps_reach_the_launch():
    """Was missed: `def run(x, num_warps=32): kernel[grid](x, num_warps=num_warps)` then `run(x, num_warps=32)`
    asks for 2048 work-items per program on AMD, at the default and at the call."""
    found = _pm110("def run(x, num_warps=32):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "run(x, num_warps=32)\n"
                   "run(x, num_warps=16)\n")
    assert found == [
        (5, 22, "num_warps=32 (run()'s default, passed on as a launch's num_warps) is 2048 work-items on AMD "
                "(limit 1024)"),
        (7, 18, "num_warps=32 (passed on by run() as a launch's num_warps) is 2048 work-items on AMD (limit 1024)")]


def test_renamed_positional_method_and_loop_arguments_are_read():
    """The parameter's own name (``warps``), a positional argument (a method's ``self`` not counted), a
    keyword-only one, and a loop variable over literals at the call, reported at the literal once."""
    found = _pm110("class Op:\n"
                   "    def launch(self, x, warps=4, *, opts=None):\n"
                   "        kernel[(1,)](x, num_warps=warps, **(opts or {}))\n"
                   "def go(op, x, fast):\n"
                   "    op.launch(x, 64)\n"
                   "    op.launch(x, 8)\n"
                   "    for w in [4, 32]:\n"
                   "        op.launch(x, warps=w)\n"
                   "        triton.Config({}, num_warps=w)\n"
                   "def plain(x, *, nw=32):\n"
                   "    return dict(num_warps=nw)\n")
    assert found == [
        (9, 18, "warps=64 (passed on by launch() as a launch's num_warps) is 4096 work-items on AMD (limit 1024)"),
        (11, 18, "warps=w takes 32 (passed on by launch() as a launch's num_warps): 2048 work-items on AMD "
                 "(limit 1024)"),
        (14, 20, "nw=32 (plain()'s default, passed on as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)")]


def test_parameters_not_passed_on_as_num_warps_stay_clean():
    """A parameter named like num_warps that no launch takes, another option (``num_stages``), a call that does not
    give the parameter, a starred call and a ROCm-guarded call are no finding."""
    found = _pm110("def count(x, num_warps=32):\n"
                   "    return x\n"
                   "count(x, num_warps=32)\n"
                   "def run(x, stages=32, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps, num_stages=stages)\n"
                   "run(x, 32)\n"
                   "run(*args, 64)\n"
                   "if torch.version.hip:\n"
                   "    run(x, num_warps=8)\n"
                   "else:\n"
                   "    run(x, num_warps=32)\n")
    assert found == []
