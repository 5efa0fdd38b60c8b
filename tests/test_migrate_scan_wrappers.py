"""PM110 through wrappers: a function that passes a parameter (or a keyword in its **kwargs) on as a launch's num_warps,
directly or through other such functions to any depth, is read at its default and at its calls in the same file
(literals, loop variables over literals)."""

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


def test_a_wrapper_of_a_wrapper_is_read_at_its_default_and_calls():
    """Was missed: `def outer(x, w=32): run(x, num_warps=w)`, where run() passes num_warps to a launch, asks for
    2048 work-items per program on AMD at outer()'s default and at each call of outer(); the message names the chain."""
    found = _pm110("def run(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def outer(x, w=32):\n"
                   "    run(x, num_warps=w)\n"
                   "outer(x, w=64)\n"
                   "outer(x, 32)\n")
    assert found == [
        (7, 16, "w=32 (outer()'s default, passed on to run() as a launch's num_warps) is 2048 work-items on AMD "
                "(limit 1024)"),
        (9, 12, "w=64 (passed on by outer() to run() as a launch's num_warps) is 4096 work-items on AMD "
                "(limit 1024)"),
        (10, 10, "w=32 (passed on by outer() to run() as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)")]


def test_a_three_level_chain_through_a_method_is_read():
    """Three levels (a method's ``top`` -> ``mid`` -> ``run`` -> the launch): the outermost default, a positional
    call (``self`` not counted) and a loop variable over literals at the call."""
    found = _pm110("def run(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def mid(x, w=4):\n"
                   "    return run(x, num_warps=w)\n"
                   "class Op:\n"
                   "    def top(self, x, warps=64):\n"
                   "        return mid(x, w=warps)\n"
                   "def go(op, x):\n"
                   "    op.top(x, 32)\n"
                   "    for n in [8, 48]:\n"
                   "        op.top(x, warps=n)\n")
    chain = "top() to mid() to run() as a launch's num_warps"
    assert found == [
        (10, 28, f"warps=64 (top()'s default, passed on to mid() to run() as a launch's num_warps) is 4096 "
                 "work-items on AMD (limit 1024)"),
        (13, 15, f"warps=32 (passed on by {chain}) is 2048 work-items on AMD (limit 1024)"),
        (14, 18, f"warps=n takes 48 (passed on by {chain}): 3072 work-items on AMD (limit 1024)")]


def test_a_cycle_of_wrappers_ends_and_is_read_where_it_reaches_a_launch():
    """Two wrappers that only call each other reach no launch (no finding, and the scan ends); a recursive pair
    where one launches is read through the other."""
    found = _pm110("def ping(x, w=32):\n"
                   "    return pong(x, w)\n"
                   "def pong(x, w=32):\n"
                   "    return ping(x, w)\n"
                   "ping(x, 64)\n"
                   "def a(x, w=32):\n"
                   "    return b(x, w=w)\n"
                   "def b(x, w=4):\n"
                   "    if x:\n"
                   "        return a(x - 1, w)\n"
                   "    kernel[(1,)](x, num_warps=w)\n"
                   "a(x, 64)\n"
                   "b(x, 64)\n")
    assert found == [
        (10, 12, "w=32 (a()'s default, passed on to b() as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)"),
        (16, 6, "w=64 (passed on by a() to b() as a launch's num_warps) is 4096 work-items on AMD (limit 1024)"),
        (17, 6, "w=64 (passed on by b() as a launch's num_warps) is 4096 work-items on AMD (limit 1024)")]


def test_num_warps_given_to_a_kwargs_forwarder_is_read():
    """Was missed: `def launch(x, **kw): kernel[grid](x, **kw)` then `launch(x, num_warps=32)`; also **kwargs into a
    triton.Config, into another forwarder, and into a wrapper that takes num_warps by name. Other keywords
    (``num_stages=32``) stay clean."""
    found = _pm110("def launch(x, **kw):\n"
                   "    kernel[(1,)](x, **kw)\n"
                   "def config(**kw):\n"
                   "    return triton.Config({}, **kw)\n"
                   "def relay(x, **opts):\n"
                   "    return launch(x, **opts)\n"
                   "def run(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def via_run(x, **kw):\n"
                   "    run(x, **kw)\n"
                   "launch(x, num_warps=32, num_stages=32)\n"
                   "config(num_warps=64)\n"
                   "relay(x, num_warps=32)\n"
                   "relay(x, num_stages=32, num_warps=8)\n"
                   "via_run(x, num_warps=32)\n")
    assert found == [
        (15, 21, "num_warps=32 (passed on by launch() as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)"),
        (16, 18, "num_warps=64 (passed on by config() as a launch's num_warps) is 4096 work-items on AMD "
                 "(limit 1024)"),
        (17, 20, "num_warps=32 (passed on by relay() to launch() as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)"),
        (19, 22, "num_warps=32 (passed on by via_run() to run() as a launch's num_warps) is 2048 work-items on AMD "
                 "(limit 1024)")]


def test_a_value_rebound_before_it_is_passed_on_stays_clean():
    """Was flagged: a parameter clamped before the launch (``num_warps = min(num_warps, 16)``) no longer passes the
    caller's value on, at one level or two; nor does a **kwargs dict whose num_warps is set or popped first."""
    found = _pm110("def run(x, num_warps=32):\n"
                   "    num_warps = min(num_warps, 16)\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "run(x, num_warps=32)\n"
                   "def fit(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def outer(x, w=32):\n"
                   "    if w > 16:\n"
                   "        w = 16\n"
                   "    fit(x, num_warps=w)\n"
                   "outer(x, w=32)\n"
                   "def capped(x, **kw):\n"
                   "    kw['num_warps'] = min(kw.get('num_warps', 4), 16)\n"
                   "    kernel[(1,)](x, **kw)\n"
                   "capped(x, num_warps=32)\n"
                   "def dropped(x, **kw):\n"
                   "    kw.pop('num_warps', None)\n"
                   "    fit(x, **kw)\n"
                   "dropped(x, num_warps=32)\n")
    assert found == []


def test_values_that_fit_through_a_chain_stay_clean():
    """Through two levels and through **kwargs, num_warps of 16 or fewer (1024 work-items on AMD) is no finding;
    the first count that does not fit (17) is."""
    found = _pm110("def run(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def outer(x, w=16):\n"
                   "    run(x, num_warps=w)\n"
                   "def relay(x, **kw):\n"
                   "    run(x, **kw)\n"
                   "outer(x, 8)\n"
                   "outer(x, w=16)\n"
                   "relay(x, num_warps=16)\n"
                   "relay(x, num_stages=32)\n"
                   "for n in [2, 4, 8, 16]:\n"
                   "    outer(x, w=n)\n"
                   "outer(x, w=17)\n")
    assert found == [(17, 12, "w=17 (passed on by outer() to run() as a launch's num_warps) is 1088 work-items on "
                              "AMD (limit 1024)")]


def test_findings_through_a_chain_point_at_the_value_s_line():
    """A default and call-site values written on lines of their own are reported there, not at the def or call."""
    found = _pm110("def run(x, num_warps=4):\n"
                   "    kernel[(1,)](x, num_warps=num_warps)\n"
                   "def outer(x,\n"
                   "          w=32):\n"
                   "    run(x, num_warps=w)\n"
                   "def relay(x, **kw):\n"
                   "    return run(x, **kw)\n"
                   "outer(\n"
                   "    x,\n"
                   "    w=64,\n"
                   ")\n"
                   "relay(x,\n"
                   "      num_warps=32)\n")
    assert [(line, column) for line, column, _ in found] == [(8, 13), (14, 7), (17, 17)]
