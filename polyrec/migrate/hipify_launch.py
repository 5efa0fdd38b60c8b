"""CUDA triple-chevron launches -> ``hipLaunchKernelGGL`` (hipify-clang's --hip-kernel-execution-syntax).

torch.utils.hipify rewrites launches with regexes that break on launches inside macros (lines ending
in ``\\``) and on templated kernels whose template arguments contain commas. Here the kernel name,
launch configuration and arguments are found by bracket matching on code with comments and strings
masked out, and copied verbatim. Output follows hipify-clang's own tests
(ROCm/HIP tests/hipify-clang/unit_tests/samples/allocators.cu):
``hipLaunchKernelGGL(HIP_KERNEL_NAME(add<float>), dim3(grid), dim3(block), 0, 0, n, A, B);``
"""

from __future__ import annotations

import re

_IDENT_CHAR = re.compile(r"[\w:]")
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}


def _split_top(text: str) -> list[str]:
    """Split on commas outside (), [] and {} (a configuration with a ``<`` is left as it was: ``launches``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts] if text.strip() else []


def _close(masked: str, start: int, opening: str) -> int:
    """Index just past the bracket matching ``masked[start] == opening``; -1 if unbalanced."""
    depth = 0
    closing = _OPEN[opening]
    for i in range(start, len(masked)):
        if masked[i] == opening:
            depth += 1
        elif masked[i] == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _kernel_start(masked: str, end: int) -> int:
    """Start of the kernel expression ending at ``end`` (name, ``ns::name``, ``name<T, 4>``)."""
    i = end
    while i > 0 and masked[i - 1] in " \t":
        i -= 1
    if i > 0 and masked[i - 1] == ">":
        depth = parens = 0  # < > nesting, and ( [ { nesting inside it: k<(N >> 1)> has a > in ()
        while i > 0:
            i -= 1
            ch = masked[i]
            if ch in ")]}":
                parens += 1
            elif ch in "([{":
                parens -= 1
                if parens < 0:
                    return end  # unbalanced: not a kernel expression we understand
            elif parens == 0:
                depth += ch == ">"
                depth -= ch == "<"
                if depth == 0:
                    break
        if depth != 0:
            return end
    while i > 0 and _IDENT_CHAR.match(masked[i - 1]):
        i -= 1
    return i


def to_launch_ggl(source: str, masked: str) -> tuple[str, int]:
    """Rewrite every ``k<<<cfg>>>(args)`` outside comments/strings; return (text, launches rewritten).

    ``masked`` is ``source`` with comments and string literals blanked (same length).
    """
    out, pos, count = [], 0, 0
    for m in re.finditer(r"<<<", masked):
        if m.start() < pos:
            continue
        cfg_end = masked.find(">>>", m.end())
        name_start = _kernel_start(masked, m.start())
        paren = cfg_end + 3
        while 0 <= cfg_end and paren < len(masked) and masked[paren] in " \t\\\n":
            paren += 1
        if cfg_end < 0 or name_start == m.start() or paren >= len(masked) or masked[paren] != "(":
            continue
        args_end = _close(masked, paren, "(")
        if args_end < 0:
            continue
        name = source[name_start:m.start()].strip()
        if "<" in masked[m.end():cfg_end]:  # Traits<4, 64>::kThreads, or a comparison: commas not told apart
            continue  # the chevrons stay (hipcc compiles them)
        config = _split_top(source[m.end():cfg_end])
        if not 2 <= len(config) <= 4:
            continue
        grid, block = (f"dim3({c})" for c in config[:2])
        shared = config[2] if len(config) > 2 else "0"
        stream = config[3] if len(config) > 3 else "0"
        kernel = f"HIP_KERNEL_NAME({name})" if "<" in name else name
        args = source[paren + 1:args_end - 1]
        head = ", ".join([kernel, grid, block, shared, stream])
        out += [source[pos:name_start], f"hipLaunchKernelGGL({head}{', ' + args.strip() if args.strip() else ''})"]
        pos = args_end
        count += 1
    out.append(source[pos:])
    return "".join(out), count
