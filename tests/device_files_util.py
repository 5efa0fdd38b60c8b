"""Device data files for tests: copies of the H200's under another name (the catalog read afresh around a test:
conftest's ``fresh_catalog``)."""

from __future__ import annotations

import importlib
from pathlib import Path


def h200_copy(folder: Path, name: str, edits=()) -> Path:
    """A data file in ``folder`` for device ``name`` (one the catalog lacks, or a name to test): the H200's,
    renamed with its match names, and each (old, new) of ``edits`` made once; the file's name is numbered, as
    ``name`` may hold characters no file name takes."""
    catalog_module = importlib.import_module("polyrec.hardware.catalog")  # the package's `catalog` is a function
    text = (catalog_module.DEVICES_DIR / "h200.toml").read_text()
    text = text.replace('name = "H200"', f'name = "{name}"', 1).replace('["H200"]', f'["{name}"]', 1)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = folder / f"device{len(list(folder.iterdir()))}.toml"
    path.write_text(text)
    return path
