"""The tree walk of scan and hipify: links to folders are not followed, and each one whose files the walk misses is
named (with where it points) as not scanned / skipped; links to files are read, dangling ones named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyrec.cli import app
from polyrec.migrate.hipify import hipify_tree
from polyrec.migrate.sarif import to_sarif
from polyrec.migrate.scan import scan_paths
from polyrec.migrate.walk import tree_files

WARP = "WARP_SIZE = 32\n"  # one PM101 finding in a .py file


@pytest.fixture
def linked_tree(tmp_path: Path) -> Path:
    """tree/ holds a.py and kernels -> ../shared/kernels (a folder outside it, holding k.py and k.cu)."""
    shared = tmp_path / "shared" / "kernels"
    shared.mkdir(parents=True)
    (shared / "k.py").write_text(WARP)
    (shared / "k.cu").write_text("void f() { cudaDeviceSynchronize(); }\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    (tree / "kernels").symlink_to("../shared/kernels")
    return tree


def _why(tmp_path: Path) -> str:
    return f"symbolic link to the folder ../shared/kernels = {tmp_path / 'shared' / 'kernels'}, not followed"


def test_a_link_to_a_folder_outside_the_tree_is_named_not_scanned(linked_tree, tmp_path):
    """Was: `kernels -> ../shared/kernels` was skipped without a word; the scan exited 0 on a tree whose kernels it
    never read. Still not followed (cycles, walks out of the tree), now listed as not scanned: exit 2."""
    result = CliRunner().invoke(app, ["migrate", "scan", str(linked_tree), "--json"])
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["findings"] == [] and doc["files"] == 1
    assert list(doc["not_scanned"]) == [str(linked_tree / "kernels")]
    assert doc["not_scanned"][str(linked_tree / "kernels")].startswith(_why(tmp_path))
    table = CliRunner().invoke(app, ["migrate", "scan", str(linked_tree)])
    assert table.exit_code == 2 and "not scanned:" in table.stderr and "../shared/kernels" in table.stderr


def test_a_link_to_a_folder_is_a_sarif_notification(linked_tree, tmp_path):
    run = to_sarif(scan_paths([linked_tree]))["runs"][0]
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert run["invocations"][0]["executionSuccessful"] is False
    assert [n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for n in notes] == \
        [str(linked_tree / "kernels")]
    assert _why(tmp_path) in notes[0]["message"]["text"]


def test_a_linked_folder_also_named_on_the_command_line_is_scanned_not_reported(linked_tree, tmp_path):
    """The way out the message gives: name the folder itself; its link is then no miss."""
    result = scan_paths([linked_tree, tmp_path / "shared" / "kernels"])
    assert result.not_scanned == {}, result.not_scanned
    assert [Path(f.path).name for f in result.findings] == ["k.py"]


def test_hipify_lists_a_linked_folder_as_skipped_and_does_not_follow_it(linked_tree, tmp_path):
    (linked_tree / "a.cu").write_text("void g() { cudaDeviceSynchronize(); }\n")
    skipped: dict[str, str] = {}
    reports, _ = hipify_tree(linked_tree, tmp_path / "out", skipped=skipped)
    assert [r.path for r in reports] == ["a.cu"] and not (tmp_path / "out" / "kernels").exists()
    assert list(skipped) == ["kernels"] and skipped["kernels"].startswith(_why(tmp_path))
    result = CliRunner().invoke(app, ["migrate", "hipify", str(linked_tree), "-o", str(tmp_path / "out2")])
    assert result.exit_code == 0, result.output
    assert "skipped kernels: symbolic link to the folder" in " ".join(result.stdout.split())


def test_links_whose_folder_the_walk_reads_anyway_are_not_reported(tmp_path):
    """A link into the tree (`latest -> v2`, `self -> .`) loses nothing: its files are read under their own names.
    One into a left-out folder (`gen -> build/gen`) or out of the tree (`up -> ..`) is reported."""
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "k.py").write_text(WARP)
    (tmp_path / "build" / "gen").mkdir(parents=True)
    (tmp_path / "build" / "gen" / "g.py").write_text(WARP)
    for name, target in (("latest", "v2"), ("self", "."), ("gen", "build/gen"), ("up", "..")):
        (tmp_path / name).symlink_to(target)
    missed: dict[str, str] = {}
    files = tree_files(tmp_path, missed)
    assert files == [tmp_path / "v2" / "k.py"]
    assert sorted(missed) == [str(tmp_path / "gen"), str(tmp_path / "up")]
    assert missed[str(tmp_path / "gen")].startswith(f"symbolic link to the folder build/gen = {tmp_path}/build/gen,")


def test_links_to_files_are_read_and_dangling_ones_named(tmp_path):
    """A link to a file is read (once, under the file's own name when the file is in the tree too; under the link's
    name when it is outside); a dangling link named like a source was dropped without a word by the scan (hipify
    named it): now not scanned, with where it points."""
    (tmp_path / "outside.py").write_text(WARP)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "reduce.py").write_text(WARP)
    (tree / "alias.py").symlink_to("reduce.py")
    (tree / "ext.py").symlink_to("../outside.py")
    (tree / "gone.py").symlink_to("../missing.py")
    result = scan_paths([tree])
    assert sorted(Path(f.path).name for f in result.findings) == ["ext.py", "reduce.py"]
    assert result.not_scanned == {str(tree / "gone.py"): "dangling symbolic link to ../missing.py"}
