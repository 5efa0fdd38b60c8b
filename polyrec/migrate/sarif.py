"""SARIF 2.1.0 output for code-scanning UIs (GitHub code scanning, VS Code SARIF viewer).

Schema: OASIS SARIF 2.1.0 (errata 01), https://docs.oasis-open.org/sarif/sarif/v2.1.0/ ; the tests
validate against the schema file shipped in tests/migrate_corpus/schema/.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from polyrec.migrate.rules import RULES
from polyrec.migrate.types import ScanResult

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL_NAME = "polyrec-migrate"


def _rule_descriptor(rule_id: str) -> dict[str, Any]:
    r = RULES[rule_id]
    return {
        "id": r.id,
        "name": r.name,
        "shortDescription": {"text": r.summary},
        "fullDescription": {"text": r.explanation},
        "help": {"text": f"{r.explanation}\nFix: {r.fix}", "markdown": f"{r.explanation}\n\n**Fix:** {r.fix}"},
        "defaultConfiguration": {"level": r.severity.value},
        "properties": {"tags": ["portability", "amd", *r.languages], "sources": list(r.sources)},
    }


def _uri(path: str) -> str:
    """A relative URI reference for a file path: ``/`` separators, reserved characters percent-encoded
    (a space is %20, ``#`` %23, ``%`` %25; RFC 3986 as SARIF 3.10.2 requires)."""
    path = path.replace("\\", "/")
    path = path[2:] if path.startswith("./") else path
    return quote(os.fsencode(path), safe=b"/")  # a name that is not UTF-8: its bytes, percent-encoded


def to_sarif(result: ScanResult, *, version: str = "0.1.0") -> dict[str, Any]:
    """The scan as one SARIF log with one run; rules carry explanation and fix as help text."""
    ids = list(RULES)
    results = [{
        "ruleId": f.rule,
        "ruleIndex": ids.index(f.rule),
        "level": RULES[f.rule].severity.value,
        "message": {"text": f.message},
        "locations": [{"physicalLocation": {
            "artifactLocation": {"uri": _uri(f.path)},
            "region": {"startLine": f.line, "startColumn": f.column, "snippet": {"text": f.snippet}},
        }}],
    } for f in result.findings]
    notifications = [{"level": "error", "message": {"text": f"{path} not scanned: {why}"},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}]}
                     for path, why in result.not_scanned.items()]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": TOOL_NAME, "version": version,
                                "rules": [_rule_descriptor(i) for i in ids]}},
            "invocations": [{"executionSuccessful": result.complete,
                             "toolExecutionNotifications": notifications}],
            "results": results,
            "columnKind": "unicodeCodePoints",  # Finding's columns count characters
        }],
    }
