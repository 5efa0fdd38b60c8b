"""polyrec.results: the .md twin of a results file can be written again from its JSON alone (a device
call may bring the JSON back without the .md)."""

from __future__ import annotations

import json

from polyrec.results import markdown_of, write_results


def test_markdown_of_the_json_is_the_markdown_written(tmp_path):
    rows = [{"case": "a", "ms": 1.23456, "n": 3}, {"case": "b", "ms": None, "n": 4}]
    json_path, md_path = write_results("probe", {"rows": rows}, rows=rows, summary={"best": "a", "ratio": 0.5},
                                       out_dir=tmp_path)
    text = md_path.read_text()
    assert markdown_of(json.loads(json_path.read_text())) == text
    assert "| a | 1.235 | 3 |" in text and "- **ratio**: 0.5" in text


def test_a_document_without_rows_or_summary_has_neither_section(tmp_path):
    json_path, md_path = write_results("bare", {}, out_dir=tmp_path)
    assert "## Rows" not in md_path.read_text() and "## Summary" not in md_path.read_text()
    assert markdown_of(json.loads(json_path.read_text())) == md_path.read_text()
