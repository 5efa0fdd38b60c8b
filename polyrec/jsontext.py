"""Strict JSON text: no NaN or infinity (Python's ``json`` writes them as ``NaN`` / ``Infinity``, which jq and
other languages' parsers reject) and no array object written as its ``str`` (a tensor as "tensor(0.5)"); and the
``result`` record of ``polyrec train --json``. Torch-free: ``python -m polyrec`` writes that record while it starts."""

from __future__ import annotations

import json
import math
from typing import Any


def strict_json(value: Any) -> Any:
    """``value`` with every NaN/inf float (in nested dicts, lists and tuples) made None, and every tensor or
    numpy value (anything with ``tolist``) made numbers and lists."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return strict_json(value.tolist())
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of ``strict_json(value)``, refusing anything left that strict JSON lacks."""
    return json.dumps(strict_json(value), allow_nan=False, **options)


def result_line(status: str, step: int | None, message: str, final_auc: float | None = None,
                samples_per_s: float | None = None) -> str:
    """The ``result`` record that ends ``polyrec train --json``'s output however the run ends (no AUC or rate for a
    run that raised; no step for one that never started)."""
    return dumps({"event": "result", "status": status, "step": step, "final_auc": final_auc,
                  "samples_per_s": samples_per_s, "message": message})
