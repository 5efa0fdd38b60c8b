"""Benchmark results files: ``benchmarks/results/<name>_<device>_<date>.json`` and ``.md``.

A results file is only ever written by the script that measured it, with the environment it was
measured in (GPU, torch, triton, commit), so that every number quoted in a doc can be traced.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from polyrec import jsontext
from polyrec.files import atomic_write_text

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _git_commit() -> str:
    here = Path(__file__).parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=here, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return dirty_marked(here, out.stdout.strip())


def dirty_marked(directory: Path, commit: str) -> str:
    """``commit`` + "-dirty" where ``directory``'s tracked files differ from it (a working tree, or a copy of one
    whose git metadata did not move with its files)."""
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True, cwd=directory, timeout=10).stdout.strip()
    return commit + ("-dirty" if dirty else "")


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch
    import triton

    env: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "commit": os.environ.get("POLYREC_COMMIT") or _git_commit(),
        "gpu": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_count"] = torch.cuda.device_count()
        env["hip"] = torch.version.hip
        env["cuda"] = torch.version.cuda
    return env


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-").lower() or "unknown"


def _markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)\n"
    cols = list(dict.fromkeys(key for row in rows for key in row))  # every row's fields, first seen first
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row[c]) if c in row else "" for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_results(name: str, payload: dict[str, Any], *, rows: list[dict[str, Any]] | None = None,
                  summary: dict[str, Any] | None = None, out_dir: Path | None = None) -> tuple[Path, Path]:
    """Write ``<name>_<device>_<date>.json`` and ``.md``; return both paths.

    ``payload`` is stored under "results"; ``rows`` (a list of flat dicts) become the markdown table
    and ``summary`` a key/value list above it. The environment is added automatically.
    """
    env = environment()
    out_dir = Path(out_dir or os.environ.get("POLYREC_RESULTS_DIR") or RESULTS_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}_{_slug(env['gpu'] or 'cpu')}_{env['date'][:10]}"
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    doc = {"name": name, "environment": env, "summary": summary or {}, "rows": rows or [], "results": payload}
    strict = jsontext.strict_json(doc)  # NaN as null, in both files: the .md stays the JSON's
    atomic_write_text(json_path, jsontext.dumps(strict, indent=1, default=str) + "\n")
    atomic_write_text(md_path, markdown_of(strict))
    return json_path, md_path


def markdown_of(doc: dict[str, Any]) -> str:
    """The ``.md`` twin of a results document (``write_results``'s JSON): environment, summary, rows. Also
    how a ``.md`` that did not come back from a device is written again from its JSON."""
    md = [f"# {doc['name']}\n", "Measured by `benchmarks/` scripts; do not edit by hand.\n"]
    md += [f"- **{k}**: {_cell(v)}" for k, v in doc["environment"].items()]
    if doc["summary"]:
        md.append("\n## Summary\n")
        md += [f"- **{k}**: {_cell(v)}" for k, v in doc["summary"].items()]
    if doc["rows"]:
        md += ["\n## Rows\n", _markdown_table(doc["rows"])]
    return "\n".join(md) + "\n"
