"""polyrec.results: the .md twin of a results file can be written again from its JSON alone (a device
call may bring the JSON back without the .md)."""

from __future__ import annotations

import json

import pytest

from polyrec.results import markdown_of, write_results


def test_markdown_of_the_json_is_the_markdown_written(tmp_path):
    rows = [{"case": "a", "ms": 1.23456, "n": 3}, {"case": "b", "ms": None, "n": 4}]
    json_path, md_path = write_results("probe", {"rows": rows}, rows=rows, summary={"best": "a", "ratio": 0.5},
                                       out_dir=tmp_path)
    text = md_path.read_text()
    assert markdown_of(json.loads(json_path.read_text())) == text
    assert "| a | 1.235 | 3 |" in text and "- **ratio**: 0.5" in text


def test_a_nan_is_written_as_null_in_strict_json(tmp_path):
    """Was: Python's bare NaN in the JSON, which jq and other languages' parsers reject."""
    rows = [{"case": "a", "auc": float("nan")}]
    json_path, md_path = write_results("probe", {"rows": rows}, rows=rows, summary={"auc": float("nan")},
                                       out_dir=tmp_path)
    doc = json.loads(json_path.read_text(), parse_constant=pytest.fail)
    assert doc["rows"] == [{"case": "a", "auc": None}] and doc["summary"] == {"auc": None}
    assert markdown_of(doc) == md_path.read_text()


def test_a_document_without_rows_or_summary_has_neither_section(tmp_path):
    json_path, md_path = write_results("bare", {}, out_dir=tmp_path)
    assert "## Rows" not in md_path.read_text() and "## Summary" not in md_path.read_text()
    assert markdown_of(json.loads(json_path.read_text())) == md_path.read_text()


def test_rows_with_fields_the_first_row_lacks_keep_them_in_the_markdown(tmp_path):
    """Was: the table took its columns from the first row only, so rows of another shape (the A/B rounds after
    the per-shape rows, a failed measurement's "error") came out as "None" cells with their values dropped."""
    rows = [{"case": "a", "ms": 1.5}, {"round": 0, "policy": "fp32", "ms_per_step": 19.3},
            {"case": "b", "error": "OutOfMemoryError"}]
    _, md_path = write_results("mixed", {}, rows=rows, out_dir=tmp_path)
    text = md_path.read_text()
    assert "| case | ms | round | policy | ms_per_step | error |" in text
    assert "|  |  | 0 | fp32 | 19.3 |  |" in text and "| b |  |  |  |  | OutOfMemoryError |" in text


def test_a_write_that_fails_midway_leaves_the_previous_files_whole(tmp_path, monkeypatch):
    """Was: each file truncated, then written in place: a full disk (or a run killed while writing) left a
    results file cut short, no longer JSON. Now the temp file is dropped and the previous files stay."""
    import os

    json_path, md_path = write_results("probe", {"ms": 1.0}, rows=[{"ms": 1.0}], out_dir=tmp_path)
    before = json_path.read_text(), md_path.read_text()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_results("probe", {"ms": 2.0}, rows=[{"ms": 2.0}], out_dir=tmp_path)
    assert (json_path.read_text(), md_path.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([json_path.name, md_path.name])
