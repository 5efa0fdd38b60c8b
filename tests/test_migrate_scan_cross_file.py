"""PM110 through wrappers across the Python files of one scan: a wrapper defined in one module (``pkg/launch.py``) and
imported into another (``from pkg.launch import run``, ``import pkg.launch as L``, ``from .launch import run``) is
read at the importer's calls, to any depth across files; a file scanned alone still knows only its own wrappers."""

from __future__ import annotations

from pathlib import Path

from polyrec.migrate.scan import scan_paths

KERNEL = "import triton\n@triton.jit\ndef kernel(x):\n    pass\n"  # lines 1-4
# A launch wrapper: its default (line 5) fits AMD.
LAUNCH = KERNEL + "def run(x, num_warps=4):\n    kernel[(1,)](x, num_warps=num_warps)\n"
LIMIT = "work-items on AMD (limit 1024)"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _pm110(root: Path, scanned: Path | None = None) -> list[tuple[str, int, str]]:
    """(file, line, message) of each PM110 finding of a scan of ``scanned`` (default ``root``), paths relative to
    ``root``."""
    prefix = f"{root}/"
    return [(f.path.removeprefix(prefix), f.line, f.message.replace(prefix, ""))
            for f in scan_paths([scanned or root]).findings if f.rule == "PM110"]


def test_a_wrapper_imported_by_name_is_read_at_the_importer_s_call(tmp_path):
    """Was missed: `from pkg.launch import run` then `run(x, num_warps=32)` asks for 2048 work-items per program on
    AMD; the message names where the wrapper is. The importer scanned alone knows no wrapper."""
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/launch.py": LAUNCH,
                      "model.py": "from pkg.launch import run\n"
                                  "run(x, num_warps=32)\n"})
    assert _pm110(tmp_path) == [
        ("model.py", 2, f"num_warps=32 (passed on by run() (pkg/launch.py) as a launch's num_warps) is 2048 {LIMIT}")]
    assert _pm110(tmp_path, tmp_path / "model.py") == []


def test_a_wrapper_reached_through_an_imported_module_is_read_positionally(tmp_path):
    """`import pkg.launch as L; L.run(x, 64)`, `import pkg.launch; pkg.launch.run(...)` and `from pkg import launch;
    launch.run(...)`: the module's name then the wrapper's, the value at its position; a namespace package (no
    __init__.py) is named as Python imports it."""
    _write(tmp_path, {"pkg/launch.py": LAUNCH,
                      "model.py": "import pkg.launch as L\n"
                                  "import pkg.launch\n"
                                  "from pkg import launch\n"
                                  "L.run(x, 64)\n"
                                  "pkg.launch.run(x, num_warps=48)\n"
                                  "launch.run(x, 40)\n"})
    via = "(passed on by run() (pkg/launch.py) as a launch's num_warps)"
    assert _pm110(tmp_path) == [("model.py", 4, f"num_warps=64 {via} is 4096 {LIMIT}"),
                                ("model.py", 5, f"num_warps=48 {via} is 3072 {LIMIT}"),
                                ("model.py", 6, f"num_warps=40 {via} is 2560 {LIMIT}")]


def test_relative_imports_resolve_against_the_importer_s_package(tmp_path):
    """`from .launch import run` and `from . import launch` in pkg/model.py name pkg/launch.py; so does an absolute
    import where the scan's root is the package itself (its name kept: pkg.launch, not launch)."""
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/launch.py": LAUNCH,
                      "pkg/model.py": "from .launch import run as go\n"
                                      "from . import launch\n"
                                      "go(x, num_warps=32)\n"
                                      "launch.run(x, 64)\n",
                      "pkg/sub/__init__.py": "",
                      "pkg/sub/deep.py": "from ..launch import run\n"
                                         "from pkg.launch import run as same\n"
                                         "run(x, 32)\n"
                                         "same(x, 32)\n"})
    via = "(passed on by run() (launch.py) as a launch's num_warps)"
    assert _pm110(tmp_path / "pkg") == [("model.py", 3, f"num_warps=32 {via} is 2048 {LIMIT}"),
                                        ("model.py", 4, f"num_warps=64 {via} is 4096 {LIMIT}"),
                                        ("sub/deep.py", 3, f"num_warps=32 {via} is 2048 {LIMIT}"),
                                        ("sub/deep.py", 4, f"num_warps=32 {via} is 2048 {LIMIT}")]


def test_a_wrapper_of_an_imported_wrapper_is_a_wrapper_to_its_own_importers(tmp_path):
    """A two-module chain: outer() in b.py passes its parameter to run() in a.py, so outer()'s default and each call
    of it from c.py are read, the message naming both files."""
    _write(tmp_path, {"a.py": LAUNCH,
                      "b.py": "from a import run\n"
                              "def outer(x, w=32):\n"
                              "    run(x, num_warps=w)\n",
                      "c.py": "import b\n"
                              "b.outer(x, w=64)\n"})
    assert _pm110(tmp_path) == [
        ("b.py", 2, f"w=32 (outer()'s default, passed on to run() (a.py) as a launch's num_warps) is 2048 {LIMIT}"),
        ("c.py", 2, f"w=64 (passed on by outer() (b.py) to run() (a.py) as a launch's num_warps) is 4096 {LIMIT}")]


def test_a_value_that_fits_is_no_finding(tmp_path):
    """num_warps=16 (1024 work-items: AMD's limit) through an imported wrapper fits; 32 does not."""
    _write(tmp_path, {"launch.py": LAUNCH,
                      "model.py": "from launch import run\n"
                                  "run(x, num_warps=16)\n"
                                  "run(x, num_warps=32)\n"})
    assert [(path, line) for path, line, _ in _pm110(tmp_path)] == [("model.py", 3)]


def test_a_name_imported_from_outside_the_scan_is_not_followed(tmp_path):
    """lib/launch.py is not under the scanned folder: `from lib.launch import run` reads nothing, while the same
    wrapper in a scanned module is read."""
    _write(tmp_path, {"lib/launch.py": LAUNCH, "app/launch.py": LAUNCH,
                      "app/model.py": "from lib.launch import run\n"
                                      "from launch import run as mine\n"
                                      "run(x, num_warps=32)\n"
                                      "mine(x, num_warps=32)\n"})
    assert _pm110(tmp_path / "app") == [
        ("model.py", 4, f"num_warps=32 (passed on by run() (launch.py) as a launch's num_warps) is 2048 {LIMIT}")]


def test_an_imported_name_bound_again_is_not_followed(tmp_path):
    """A name assigned after its import, or shadowed by a def of the same name, is not the wrapper any more; the
    module's name, not bound again, is still followed."""
    _write(tmp_path, {"launch.py": LAUNCH,
                      "model.py": "from launch import run\n"
                                  "import launch\n"
                                  "run = print\n"
                                  "run(x, num_warps=32)\n"
                                  "launch.run(x, num_warps=32)\n",
                      "shadow.py": "from launch import run\n"
                                   "def run(x, num_warps=4):\n"
                                   "    return x\n"
                                   "run(x, num_warps=32)\n"})
    assert [(path, line) for path, line, _ in _pm110(tmp_path)] == [("model.py", 5)]


def test_the_wrapper_s_default_is_reported_once_however_many_files_import_it(tmp_path):
    """run()'s default num_warps=32 is one finding in launch.py, not one per importer; the importers' own calls are
    read too."""
    _write(tmp_path, {"launch.py": LAUNCH.replace("num_warps=4", "num_warps=32"),
                      "one.py": "from launch import run\nrun(x)\n",
                      "two.py": "from launch import run\nrun(x, num_warps=8)\nrun(x, num_warps=64)\n"})
    assert _pm110(tmp_path) == [
        ("launch.py", 5, f"num_warps=32 (run()'s default, passed on as a launch's num_warps) is 2048 {LIMIT}"),
        ("two.py", 3, f"num_warps=64 (passed on by run() (launch.py) as a launch's num_warps) is 4096 {LIMIT}")]


def test_a_cycle_of_imports_ends_and_is_read_where_it_reaches_a_launch(tmp_path):
    """a.py and b.py import each other's wrapper (ping() -> pong() -> ping()...): the scan ends, and a call of ping()
    is read through pong()'s launch."""
    _write(tmp_path, {"a.py": "from b import pong\n"
                              "def ping(x, w=4):\n"
                              "    return pong(x, w=w)\n",
                      "b.py": KERNEL + "from a import ping\n"
                                       "def pong(x, w=4):\n"
                                       "    if x:\n"
                                       "        return ping(x - 1, w)\n"
                                       "    kernel[(1,)](x, num_warps=w)\n"
                                       "ping(x, 64)\n"})
    assert _pm110(tmp_path) == [
        ("b.py", 10, f"w=64 (passed on by ping() (a.py) to pong() (b.py) as a launch's num_warps) is 4096 {LIMIT}")]


def test_an_imported_class_s_wrapper_method_and_a_re_export_are_read(tmp_path):
    """A class imported from another file brings its wrapper methods (``op.launch(x, 64)``), and a package's
    ``__init__.py`` that imports a wrapper passes it on (``from pkg import run``)."""
    _write(tmp_path, {"pkg/__init__.py": "from .launch import run\n",
                      "pkg/launch.py": LAUNCH + "class Op:\n"
                                                "    def launch(self, x, warps=4):\n"
                                                "        run(x, num_warps=warps)\n",
                      "model.py": "from pkg import run\n"
                                  "from pkg.launch import Op\n"
                                  "op = Op()\n"
                                  "op.launch(x, 64)\n"
                                  "run(x, 32)\n"})
    assert _pm110(tmp_path) == [
        ("model.py", 4, f"warps=64 (passed on by launch() (pkg/launch.py) to run() as a launch's num_warps) is 4096 "
                        f"{LIMIT}"),
        ("model.py", 5, f"num_warps=32 (passed on by run() (pkg/launch.py) as a launch's num_warps) is 2048 {LIMIT}")]


def test_a_module_that_cannot_be_parsed_is_reported_and_its_importers_still_read(tmp_path):
    """An imported module with a syntax error is not scanned (and said so); its importer's other imports are read."""
    _write(tmp_path, {"launch.py": LAUNCH, "broken.py": "def run(x, num_warps=4:\n",
                      "model.py": "from broken import run as bad\n"
                                  "from launch import run\n"
                                  "bad(x, num_warps=32)\n"
                                  "run(x, num_warps=32)\n"})
    result = scan_paths([tmp_path])
    assert [(f.path.removeprefix(f"{tmp_path}/"), f.line) for f in result.findings if f.rule == "PM110"] == [
        ("model.py", 4)]
    assert list(result.not_scanned) == [str(tmp_path / "broken.py")]
