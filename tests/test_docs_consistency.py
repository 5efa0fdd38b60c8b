"""The docs name only things that exist. In README.md and docs/*.md: relative links and backticked
repo paths, results names (`tbe_*`, `e2e_nvidia-h200_2026-12-01`) and `tests/x.py::test_y` are looked
up in the tree; `polyrec <command> ... --flag` in the CLI's own typer/click definition, a lone
`--flag` in any command or benchmark script, `benchmarks/x.py --flag` in that script; `make <target>`
in the Makefile; `polyrec.a.B` by import and `Class.member` (a class of polyrec/) by its members.
Fast and CPU-only: nothing is run."""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest
from typer.main import get_command

from polyrec.cli import app

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Broken references in docs this check does not fix itself, one entry per reference, each with its
# reason: (doc relative to the repo root, the reference exactly as reported). Whole files are never
# skipped; an entry that no longer matches a broken reference fails `test_allow_list_is_not_stale`.
ALLOWED: dict[tuple[str, str], str] = {}

# First path segments that name the repo's folders, and the package's subpackages (docs often write
# `kernels/gemm.py` for `polyrec/kernels/gemm.py`).
REPO_DIRS = ("polyrec", "benchmarks", "tests", "docs", "requirements")
PACKAGE_DIRS = tuple(p.name for p in (ROOT / "polyrec").iterdir() if (p / "__init__.py").exists())
DATE = re.compile(r"20\d\d-\d\d-\d\d")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# an inline code span: no backtick inside, no blank line inside (markdown ends a span there)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*?)`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


# --- reading the docs -------------------------------------------------------------------------------

def rel(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


def code_spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks, with line breaks folded to spaces."""
    return [m.group(1).replace("\n", " ") for m in SPAN.finditer(FENCE.sub("", text))]


def code_lines(text: str) -> list[str]:
    """The lines of fenced blocks, a `# comment` cut off (shell comments, not the `$ ` prompts)."""
    lines = []
    for block in FENCE.findall(text):
        for line in block.splitlines()[1:-1]:
            lines.append(re.sub(r"\s#\s.*$", "", line))
    return lines


def words(span: str) -> list[str]:
    """The span's words, trailing punctuation of prose (`,` `;` `:` `.` `)`) stripped."""
    return [w.rstrip(",;:.)") for w in span.split()]


# --- paths ------------------------------------------------------------------------------------------

def is_placeholder(word: str) -> bool:
    return any(c in word for c in "<>$") or "..." in word or re.fullmatch(r"[0-9a-f]{7,40}:.*", word) is not None


def expand_braces(word: str) -> list[str]:
    """`a{1,2}b` -> `a1b`, `a2b` (one level, as the docs write world sizes)."""
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    return [x for alt in m.group(1).split(",") for x in expand_braces(word[:m.start()] + alt + word[m.end():])]


def exists(path: Path) -> bool:
    """The path (a glob allowed), or a results name without its `.json` / `.md`."""
    pattern = path.relative_to(ROOT).as_posix().rstrip("/")
    return any(any(ROOT.glob(pattern + ext)) for ext in ("", ".json", ".md"))


@cache
def bare_names() -> frozenset[str]:
    """Every file name in the tracked folders (a doc may write `dist.py` inside a section on runtime/)."""
    return frozenset(p.name for d in REPO_DIRS for p in (ROOT / d).rglob("*") if p.is_file())


def path_candidates(word: str) -> list[Path] | None:
    """Where a path-like word may live, or None when the word is not a repo path."""
    if is_placeholder(word) or word.startswith(("http", "/", "~", "-")):
        return None
    word = word.split("::")[0]
    head = word.split("/")[0]
    if head in REPO_DIRS or word in ("Makefile", "pyproject.toml", "README.md"):
        return [ROOT / word]
    if head in PACKAGE_DIRS and "/" in word:
        return [ROOT / "polyrec" / word]
    if word.startswith(".venv/") or word.startswith("out/"):
        return None
    results_name = DATE.search(word) or "_nvidia-h200" in word or word.endswith("_*")
    if re.fullmatch(r"[a-z][a-z0-9_{},*\-]*", word.rstrip("/")) and results_name:
        # a results name (`tbe_*`, `e2e_nvidia-h200_2026-12-01`, a run folder), or a file of a run
        # folder named beside it (`s16ab_*` of `tbe_lane_ab_2026-11-30/`)
        return [RESULTS / word, RESULTS / "*" / word]
    if "/" in word and DATE.search(head):
        return [RESULTS / word]  # inside a results run folder: `tbe_lane_ab_2026-11-30/s16*`
    return None


def missing_test(word: str) -> str | None:
    """`tests/x.py::test_y` (or `x.py::test_y`): the test function is defined in that file."""
    if "::" not in word:
        return None
    file, name = word.split("::", 1)
    name = name.split("[")[0]
    paths = [ROOT / file] if "/" in file else [ROOT / "tests" / file, ROOT / "tests" / "gpu" / file]
    for path in paths:
        if path.exists():
            if "*" in name:  # `test_a_*prepared*`: a pattern over the file's tests
                pattern = re.compile(re.escape(name).replace(r"\*", r"\w*"))
                found = any(pattern.fullmatch(n) for n in re.findall(r"def (test_\w+)", path.read_text()))
            else:
                found = re.search(rf"def {re.escape(name)}\(", path.read_text()) is not None
            return None if found else f"{word}: no test {name} in {path.relative_to(ROOT)}"
    return f"{word}: no such test file"


def broken_paths(doc: Path) -> list[str]:
    text = doc.read_text()
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        if not (doc.parent / target.split("#")[0]).exists():
            broken.append(target)
    for span in code_spans(text):
        for word in words(span):
            if word.endswith(".py") and "/" not in word and "::" not in word and re.fullmatch(r"[\w\-]+\.py", word):
                if word not in bare_names():
                    broken.append(word)
                continue
            if "::" in word and ".py::" in word:
                problem = missing_test(word)
                if problem:
                    broken.append(word)
                continue
            for expanded in expand_braces(word):
                candidates = path_candidates(expanded)
                if candidates is not None and not any(exists(c) for c in candidates):
                    broken.append(word)
                    break
    return broken


# --- the CLI ----------------------------------------------------------------------------------------

@cache
def cli():
    return get_command(app)


def command_flags(path: tuple[str, ...]) -> set[str]:
    command = cli()
    for name in path:
        command = command.commands[name]
    flags = {"--help"}
    for param in command.params:
        flags.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    return flags


@cache
def every_flag() -> frozenset[str]:
    """The flags of every polyrec command and the option strings of every benchmark script."""
    flags: set[str] = set()

    def walk(command) -> None:
        flags.update(command_flags_of(command))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(cli())
    for script in (ROOT / "benchmarks").glob("*.py"):
        flags.update(re.findall(r"""["'](--[a-z][a-z0-9-]*)["']""", script.read_text()))
    return frozenset(flags)


def command_flags_of(command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


COMMAND = re.compile(r"(?<![\w.-])polyrec\s+([a-z][\w-]*)(.*)")


def starts_command(before: str) -> bool:
    """Whether `polyrec` after ``before`` begins a command (else `polyrec <word>` may be prose, as in
    "not a polyrec checkpoint"): at the start, after a prompt, `-m`, a `bin/` or `VAR=value` words."""
    before = re.sub(r"(?:\s*\b[A-Z_]+=\S*)+\s*$", "", before)
    return re.search(r"(?:^|[$&;|]|-m|bin/)\s*$", before) is not None


def cli_mentions(text: str) -> list[tuple[tuple[str, ...] | None, str, str]]:
    """(command path or None if unknown, flag, the mention) for each `polyrec <cmd> ... --flag`."""
    found = []
    for chunk in code_spans(text) + code_lines(text):
        for m in COMMAND.finditer(chunk):
            rest = re.split(r"\s(?:\||&&|;|>)\s|\s#\s", m.group(2))[0]
            group = cli().commands.get(m.group(1))
            if group is None:
                if starts_command(chunk[:m.start()]):
                    found.append((None, m.group(1), m.group(0).strip()))
                continue
            path = (m.group(1),)
            tokens = rest.split()
            if getattr(group, "commands", None) and tokens and tokens[0] in group.commands:
                path += (tokens[0],)
            for flag in re.findall(r"(?<![\w/-])--?[a-zA-Z][a-z0-9-]*", rest):
                found.append((path, flag, m.group(0).strip()))
            for combined in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*(?:/--[a-z][a-z0-9-]*)+)", rest):
                for flag in combined.split("/")[1:]:
                    found.append((path, flag, m.group(0).strip()))
    return found


def broken_flags(doc: Path) -> list[str]:
    broken = []
    for path, flag, mention in cli_mentions(doc.read_text()):
        if path is None:
            broken.append(f"polyrec {flag}")
        elif flag not in command_flags(path):
            broken.append(f"polyrec {' '.join(path)} {flag}")
    return broken


SCRIPT = re.compile(r"(?:^|[\s`/])((?:benchmarks/)?[a-z0-9_]+\.py)((?:\s+[^\s`]+)*)")


def broken_script_flags(doc: Path) -> list[str]:
    """`benchmarks/x.py --flag` (or `x.py --flag` for a script of benchmarks/): the script reads it."""
    broken = []
    for chunk in code_spans(doc.read_text()) + code_lines(doc.read_text()):
        for m in SCRIPT.finditer(chunk):
            script = ROOT / "benchmarks" / Path(m.group(1)).name
            if not script.exists():
                continue
            rest = re.split(r"\s(?:\||&&|;|>)\s", m.group(2))[0]
            source = script.read_text()
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest):
                if f'"{flag}"' not in source and f"'{flag}'" not in source:
                    broken.append(f"{script.name} {flag}")
    return broken


def broken_bare_flags(doc: Path) -> list[str]:
    """A code span that is a flag on its own (`--no-host-probe`, `--sarif FILE`, `--url/--model`),
    beside prose that names its command: some polyrec command or benchmark script must define it."""
    broken = []
    for span in code_spans(doc.read_text()):
        if span.startswith("--"):
            for flag in span.split()[0].split("/"):
                flag = flag.split("=")[0].rstrip(",;:.)")
                if flag.startswith("--") and flag not in every_flag():
                    broken.append(flag)
    return broken


# --- make targets and Python names ------------------------------------------------------------------

def broken_make_targets(doc: Path) -> list[str]:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    text = doc.read_text()
    mentioned = set()
    for chunk in code_spans(text) + code_lines(text):
        mentioned.update(re.findall(r"(?:^|\s)make\s+([\w-]+)", chunk))
    return sorted(f"make {t}" for t in mentioned - targets)


def resolves(dotted: str) -> bool:
    """`polyrec.a.b.C.d`: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@cache
def package_classes() -> dict[str, list[tuple[str, str]]]:
    """Class name -> (module, the module's source) for every class defined in polyrec/."""
    classes: dict[str, list[tuple[str, str]]] = {}
    for file in (ROOT / "polyrec").rglob("*.py"):
        source = file.read_text()
        module = ".".join(file.relative_to(ROOT).with_suffix("").parts)
        for name in re.findall(r"^\s*class ([A-Z]\w*)\b", source, re.M):
            classes.setdefault(name, []).append((module, source))
    return classes


def has_member(cls_name: str, attr: str) -> bool:
    """`Class.attr`: a class attribute, method or field, or an attribute its module sets on `self`."""
    for module, source in package_classes()[cls_name]:
        cls = getattr(importlib.import_module(module), cls_name, None)
        fields = {n for c in getattr(cls, "__mro__", ()) for n in getattr(c, "__annotations__", {})}
        if hasattr(cls, attr) or attr in fields:
            return True
        if re.search(rf"\bself\.{re.escape(attr)}\s*(?::[^=\n]+)?=(?!=)", source):
            return True
    return False


def broken_python_names(doc: Path) -> list[str]:
    """`polyrec.a.b.Name` by import; `Class.member` for a class defined in polyrec/ by its members."""
    names, members = set(), set()
    for span in code_spans(doc.read_text()):
        names.update(re.findall(r"(?<![\w./])polyrec(?:\.[A-Za-z_]\w*)+", span))
        members.update(re.findall(r"(?<![\w./:])([A-Z]\w*)\.([A-Za-z_]\w*)\b(?!\.\w)", span))
    broken = [n for n in names if not resolves(n)]
    broken += [f"{c}.{a}" for c, a in members if c in package_classes() and not has_member(c, a)]
    return sorted(broken)


# --- the tests --------------------------------------------------------------------------------------

CHECKS = {
    "path": broken_paths,
    "cli flag": broken_flags,
    "script flag": broken_script_flags,
    "flag": broken_bare_flags,
    "make target": broken_make_targets,
    "python name": broken_python_names,
}


@cache
def all_broken() -> dict[tuple[str, str], str]:
    """(doc, reference) -> kind, over every doc and check."""
    return {(rel(doc), ref): kind for doc in DOCS for kind, check in CHECKS.items() for ref in check(doc)}


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_doc_references_exist(doc):
    broken = [f"{kind}: {ref}" for (d, ref), kind in all_broken().items()
              if d == rel(doc) and (d, ref) not in ALLOWED]
    assert not broken, f"{rel(doc)} names things that do not exist:\n  " + "\n  ".join(broken)


def test_allow_list_is_not_stale():
    stale = [key for key in ALLOWED if key not in all_broken()]
    assert not stale, f"allow-list entries that are no longer broken (remove them): {stale}"


def test_the_checks_find_what_is_broken(tmp_path):
    """The checks are not vacuous: a doc with one broken reference of each kind fails each."""
    doc = tmp_path / "bad.md"
    doc.write_text(
        "See [x](no_such_file.md), `benchmarks/results/no_such_result_2026-01-01.json`,\n"
        "`polyrec/kernels/no_such.py`, `kernels/no_such.py`, `no_such_thing_nvidia-h200_2026-11-29`,\n"
        "`tests/test_gemm.py::test_no_such_test`, `no_such_module.py`.\n"
        "```bash\npolyrec train --preset dcnv2-small --no-such-flag   # comment --ignored\n"
        "polyrec migrate scan PATH --sarif out.sarif --bogus\npolyrec frobnicate\n"
        "make no-such-target\n```\n"
        "Also `polyrec plan --fleet H200x8 --nope`, `benchmarks/multi_gpu.py --no-such-option` and\n"
        "`polyrec.kernels.gemm.no_such_function`, `GemmConfig.no_such_field`, `--no-such-anywhere`, `polyrec migrate hipify P -x`;\n"
        "fine: `polyrec hw calibrate --no-host-probe`, `GemmConfig.split_k`, `TableBatchedEmbedding.one_dim`, `--sarif FILE`, `polyrec migrate hipify P -o OUT`,\n"
        "`polyrec migrate port K --url/--model/--api-key`, `polyrec.kernels.gemm.matmul(a, b)`.\n")
    assert sorted(broken_paths(doc)) == sorted([
        "no_such_file.md", "benchmarks/results/no_such_result_2026-01-01.json", "polyrec/kernels/no_such.py",
        "kernels/no_such.py", "no_such_thing_nvidia-h200_2026-11-29", "tests/test_gemm.py::test_no_such_test",
        "no_such_module.py"])
    assert sorted(broken_flags(doc)) == sorted([
        "polyrec train --no-such-flag", "polyrec migrate scan --bogus", "polyrec frobnicate",
        "polyrec plan --nope", "polyrec migrate hipify -x"])
    assert broken_bare_flags(doc) == ["--no-such-anywhere"]
    assert broken_script_flags(doc) == ["multi_gpu.py --no-such-option"]
    assert broken_make_targets(doc) == ["make no-such-target"]
    assert broken_python_names(doc) == ["GemmConfig.no_such_field", "polyrec.kernels.gemm.no_such_function"]
