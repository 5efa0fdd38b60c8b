"""``polyrec migrate port``: propose / verify loop that ports a CUDA kernel or a PyTorch op to Triton.

Each round asks the provider for a complete Python module (``@triton.jit`` kernels and ``run(*inputs)``),
verifies it (verify.py), and feeds the failures back (its warnings too, as advice), up to ``rounds`` times.
Every attempt (prompt, reply, extracted code, verdict) is appended to a JSON-lines transcript. Without a
provider only the deterministic stages run (scan, and hipify for CUDA sources) and the report says what is left.
A ``progress`` callback gets one line per step of a round (asking the provider, verifying, the verdict): a round
waits on the LLM and on a verify that can take minutes; the CLI prints them on stderr.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyrec.files import atomic_write_bytes, atomic_write_text
from polyrec.migrate.hipify import HIPIFY_SUFFIXES, hipify_source
from polyrec.migrate.outputs import refuse_overwrite
from polyrec.migrate.providers import Provider, ProviderError
from polyrec.migrate.scan import scan_paths
from polyrec.migrate.verify import VerifyConfig, load_reference, verify

SYSTEM_PROMPT = """You port GPU kernels to portable Triton that runs on NVIDIA (sm_90) and AMD (gfx942, gfx950).
Reply with one complete Python module in a ```python block. It must:
- import only torch, triton, triton.language as tl and math;
- call triton.language functions as tl.NAME, not through `from triton.language import ...` or a
  module-level alias such as `mm = tl.dot` (the verifier's CPU interpreter cannot run those), and never
  hold a function in a kernel's variable (`d = tl.dot` in a kernel: the GPU compile refuses it);
- use tl / tl.math (tl.exp, tl.math.rsqrt), not triton.language.extra.libdevice (the interpreter cannot run it);
- define @triton.jit kernel(s) with no torch calls and no try/except inside them, and no autotune;
- define run(*inputs) -> torch.Tensor that allocates the output, launches the kernel(s) and returns it;
- handle every shape (mask the tails), never cache results, never call or import the reference;
- keep num_warps <= 16 and tiles small enough for 64 KiB of LDS (gfx942)."""
# A fenced block (CommonMark): ``` and an info string at the start of a line, up to ``` alone on a line.
_CODE_BLOCK = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^\n`]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
#: Info-string languages of a block that holds the module (no tag: plain code). Python's names in GitHub
#: Linguist's languages.yml (python, python3; py from its .py extension) and py3; other blocks (cuda, cpp,
#: hip...) quote the source being ported.
PYTHON_TAGS = frozenset({"", "python", "python3", "py", "py3"})


@dataclass(kw_only=True, slots=True)
class PortReport:
    """Outcome of one port."""

    kernel: str
    reference: str
    provider: str | None
    accepted: bool = False
    rounds_used: int = 0
    result_path: str | None = None  # the accepted candidate
    transcript_path: str | None = None
    scan_findings: list[str] = field(default_factory=list)
    hipified_path: str | None = None
    left: list[str] = field(default_factory=list)  # what a person (or a configured LLM) still has to do

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def extract_code(reply: str) -> str:
    """The last fenced Python (or untagged) block of a reply, or the whole reply when it has none."""
    blocks = [code for tag, code in _CODE_BLOCK.findall(reply) if tag.lower() in PYTHON_TAGS]
    return (blocks[-1] if blocks else reply).strip() + "\n"


def first_prompt(kernel: Path, reference: str, findings: list[str]) -> list[dict[str, str]]:
    module, func = load_reference(reference)
    ref_src = inspect.getsource(func) + "\n" + inspect.getsource(module.make_inputs)
    user = (f"Port this kernel ({kernel.name}):\n```\n{kernel.read_text(errors='replace')}\n```\n"
            f"The result must match this reference ({reference}) on shapes {list(module.SHAPES)} and on sizes "
            "derived from them (off-by-one tails, size 1, random sizes up to the largest, sizes above it):\n"
            f"```python\n{ref_src}```\n")
    if findings:
        user += "AMD hazards found in the source:\n" + "\n".join(f"- {f}" for f in findings) + "\n"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _hazards(path: Path) -> list[str]:
    """The scan's findings in ``path`` as report lines ("PM101 line 4: ..."), and why it was not scanned if so."""
    scan = scan_paths([path])
    return [f"{f.rule} line {f.line}: {f.message}" for f in scan.findings] + \
        [f"not scanned: {why}" for why in scan.not_scanned.values()]


def _deterministic(kernel: Path, work_dir: Path, report: PortReport) -> list[str]:
    """Scan the kernel (its hazards go into the prompt), hipify a CUDA one into ``work_dir``; return the hazards
    left for a person: the hipified copy's (hipify fixed some), else the kernel's."""
    report.scan_findings = _hazards(kernel)
    if kernel.suffix not in HIPIFY_SUFFIXES:
        return [f"hazard: {f}" for f in report.scan_findings]
    text, _ = hipify_source(kernel.read_bytes().decode("utf-8", "surrogateescape"), kernel.name)
    out = work_dir / _hipified_name(kernel)
    atomic_write_bytes(out, text.encode("utf-8", "surrogateescape"))
    report.hipified_path = str(out)
    return [f"hazard in {out.name}: {f}" for f in _hazards(out)]


def port(kernel: Path, reference: str, provider: Provider | None, *, work_dir: Path, rounds: int = 4,
         config: VerifyConfig | None = None, progress: Callable[[str], None] | None = None) -> PortReport:
    """Run the loop; write attempts, the transcript, ``port-report.json`` (also when a round raises or on
    Ctrl-C) and (when accepted) ``port_result.py`` in ``work_dir``, each as a temporary file renamed over it;
    ``progress`` (default: nothing) gets a line per step of a round. ValueError for a ``work_dir`` where one of
    them would replace the kernel or the reference's file, and for no rounds or no seeds."""
    if rounds < 1:
        raise ValueError(f"port: rounds must be >= 1, got {rounds}")
    if config is not None and not config.seeds:
        raise ValueError("port: at least one seed is needed (--seeds >= 1)")
    if not kernel.is_file():
        why = "is a directory, not a file" if kernel.is_dir() else "does not exist"
        raise FileNotFoundError(f"port: kernel file {kernel} {why}")
    module, func = load_reference(reference)  # bad input with or without a provider (without one: unread, exit 1)
    refuse_overwrite(_outputs(kernel, work_dir, rounds), [kernel, *_source_files(module, func)],
                     f"port: --out {work_dir}", "give another --out directory")
    work_dir.mkdir(parents=True, exist_ok=True)
    report = PortReport(kernel=str(kernel), reference=reference,
                        provider=provider.describe() if provider is not None else None)
    try:
        hazards = _deterministic(kernel, work_dir, report)
        if provider is None:
            report.left = ["no LLM endpoint configured (--url/--model or POLYREC_LLM_URL/POLYREC_LLM_MODEL): "
                           "write a Triton candidate by hand and check it with `polyrec migrate verify`", *hazards]
        else:
            _loop(kernel, reference, provider, work_dir, rounds, config, report, progress or _silent)
    except BaseException as exc:  # Ctrl-C or a crash in a later round: the rounds so far stay on record
        report.left.append(f"stopped in round {report.rounds_used}: {type(exc).__name__} {exc}".rstrip())
        raise
    finally:
        atomic_write_text(work_dir / "port-report.json", json.dumps(report.as_dict(), indent=1) + "\n")
    return report


def _silent(line: str) -> None:
    """The default ``progress``: API callers get the report, not a running commentary."""


def _hipified_name(kernel: Path) -> str:
    """The name of the hipified copy of a CUDA ``kernel`` in the work folder: ``k.cu`` -> ``k.hip.cu``."""
    return f"{kernel.stem}.hip{kernel.suffix}"


def _outputs(kernel: Path, work_dir: Path, rounds: int) -> list[Path]:
    """Every file ``port`` may write in ``work_dir`` in ``rounds`` rounds."""
    names = [*(f"attempt_{i}.py" for i in range(1, rounds + 1)), "port_result.py", "port-report.json",
             "transcript.jsonl"]
    if kernel.suffix in HIPIFY_SUFFIXES:
        names.append(_hipified_name(kernel))
    return [work_dir / name for name in names]


def _source_files(module: Any, func: Any) -> list[Path]:
    """The reference's files: its module's and the one defining its function (where they have one)."""
    try:
        defining = inspect.getsourcefile(func)
    except TypeError:  # a builtin or C function: no source file
        defining = None
    return [Path(f) for f in (getattr(module, "__file__", None), defining) if f]


def _loop(kernel: Path, reference: str, provider: Provider, work_dir: Path, rounds: int,
          config: VerifyConfig | None, report: PortReport, progress: Callable[[str], None]) -> None:
    """The propose / verify rounds; fills ``report`` and tells ``progress`` each step."""
    transcript = work_dir / "transcript.jsonl"
    entries: list[str] = []  # the transcript's lines so far
    atomic_write_text(transcript, "")
    report.transcript_path = str(transcript)
    messages = first_prompt(kernel, reference, report.scan_findings)
    for round_ in range(1, rounds + 1):
        report.rounds_used = round_
        step = f"round {round_}/{rounds}"
        entry: dict[str, Any] = {"round": round_, "provider": report.provider, "request": messages}
        progress(f"{step}: asking {report.provider}...")
        try:
            reply = provider.complete(messages)
            if not isinstance(reply, str):
                raise ProviderError(f"{report.provider}: reply is {type(reply).__name__}, not text")
        except ProviderError as exc:
            entry["error"] = str(exc)
            _append(transcript, entries, entry)
            report.left.append(f"provider failed in round {round_}: {exc}")
            progress(f"{step}: the provider failed")
            return
        candidate = work_dir / f"attempt_{round_}.py"
        code = extract_code(reply)
        atomic_write_text(candidate, code)
        progress(f"{step}: verifying {candidate.name}...")
        verdict = verify(candidate, reference, config)
        entry |= {"response": reply, "candidate": str(candidate), "verdict": verdict.as_dict()}
        _append(transcript, entries, entry)
        progress(f"{step}: {_verdict_line(verdict.accepted, len(verdict.failures))}")
        if verdict.accepted:
            result = work_dir / "port_result.py"
            atomic_write_text(result, code)
            report.accepted, report.result_path = True, str(result)
            return
        feedback = "The candidate failed verification:\n" + "\n".join(f"- {f}" for f in verdict.failures[:20])
        if verdict.warnings:
            feedback += "\nWarnings (advice; they do not fail verification):\n" + "\n".join(
                f"- {w}" for w in verdict.warnings[:20])
        messages = [*messages, {"role": "assistant", "content": reply},
                    {"role": "user", "content": feedback + "\nReply with the corrected complete module."}]
    report.left.append(f"no candidate passed verification in {rounds} rounds; see {transcript}")


def _verdict_line(accepted: bool, failures: int) -> str:
    """A round's verdict for ``progress``: "accepted", "rejected (3 failures)"."""
    return "accepted" if accepted else f"rejected ({failures} failure{'' if failures == 1 else 's'})"


def _append(path: Path, entries: list[str], entry: dict[str, Any]) -> None:
    """Add ``entry`` to the JSON-lines transcript ``entries`` and write it whole to ``path`` (a temporary file
    renamed over it: a transcript that is a link is replaced, never written through)."""
    entries.append(json.dumps(entry, default=str) + "\n")
    atomic_write_text(path, "".join(entries))
