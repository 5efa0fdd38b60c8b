"""Evaluate the integer constant expressions of CUDA/C++ source (#define values, constexpr ints).

Enough C for shared-memory sizes and lane masks: integer literals with suffixes, + - * / % << >> & | ~,
parentheses, casts to integer types, ``sizeof`` of the builtin/vector types below, and names bound to
other constants. Anything else evaluates to None (unknown) rather than to a guess.
"""

from __future__ import annotations

import ast
import operator
import re

#: sizeof() of CUDA scalar and vector types, in bytes (CUDA programming guide, built-in vector types).
TYPE_BYTES: dict[str, int] = {
    "char": 1, "signed char": 1, "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1,
    "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1,
    "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2,
    "__nv_bfloat16": 2, "nv_bfloat16": 2, "at::Half": 2, "at::BFloat16": 2,
    "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4, "float": 4, "half2": 4,
    "__half2": 4, "__nv_bfloat162": 4,
    "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8, "size_t": 8, "double": 8,
    "float2": 8, "int2": 8, "float4": 16, "int4": 16, "uint4": 16, "double2": 16,
}

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
        ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_SIZEOF = re.compile(r"sizeof\s*\(\s*([A-Za-z_][\w: ]*?)\s*\)")
_CAST = re.compile(r"\(\s*(unsigned|signed|int|long|size_t|unsigned int|unsigned long long|long long|"
                   r"unsigned long|u?int(?:8|16|32|64)_t)\s*\)")
#: C integer literals: hex, binary, octal, decimal, with ' digit separators (C++14/C23) and u/l suffixes.
_NUMBER = re.compile(r"\b(0[xX][0-9a-fA-F](?:'?[0-9a-fA-F])*|0[bB][01](?:'?[01])*|\d(?:'?\d)*)([uUlL]*)\b")
_UNSIGNED_CAST = re.compile(r"^(unsigned|size_t|uint)")
_WIDE_CAST = re.compile(r"long long|64|size_t")


class _NotConstant(ValueError):
    pass


def parse_int(literal: str) -> int:
    """The value of one C integer literal (no suffix): 0x.., 0b.., 0777 octal, 1'000. ValueError if malformed."""
    digits = literal.replace("'", "")
    if digits[:2] in ("0x", "0X"):
        return int(digits[2:], 16)
    if digits[:2] in ("0b", "0B"):
        return int(digits[2:], 2)
    if len(digits) > 1 and digits[0] == "0":
        return int(digits[1:], 8)  # 08 / 09 are malformed octal: ValueError
    return int(digits, 10)
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def _unsigned_width(text: str) -> int:
    """0 when the expression is signed; else the bit width (32/64) of its unsigned operands.

    C's usual arithmetic conversions make the whole expression unsigned once an operand is (for the
    constant expressions used as masks and sizes): ``~0u`` and ``(unsigned)-1`` are 0xffffffff.
    """
    width = 0
    for m in _NUMBER.finditer(text):
        suffix = m.group(2).lower()
        if "u" in suffix:
            width = max(width, 64 if "ll" in suffix else 32)
    for m in _CAST.finditer(text):
        if _UNSIGNED_CAST.match(m.group(1)):
            width = max(width, 64 if _WIDE_CAST.search(m.group(1)) else 32)
    return width


def _literal(m: re.Match[str]) -> str:
    try:
        return str(parse_int(m.group(1)))
    except ValueError:
        raise _NotConstant(m.group(0)) from None


def _to_python(text: str, names: dict[str, int]) -> str | None:
    text = _SIZEOF.sub(lambda m: str(TYPE_BYTES.get(m.group(1), "__unknown__")), text)
    text = _CAST.sub("", text)
    text = _NUMBER.sub(_literal, text)
    unknown = [n for n in _NAME.findall(text) if n not in names]
    if unknown:
        return None
    text = _NAME.sub(lambda m: str(names[m.group(0)]), text)
    return text.replace("/", "//").replace("~", "-1-")


def _eval_node(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= right < 128:
            raise ValueError("shift out of range")  # undefined in C; keeps 1 << 10**12 from eating memory
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise ValueError("not a constant")


def evaluate(text: str, names: dict[str, int]) -> int | None:
    """The integer value of a C constant expression, or None when it is not one we can evaluate."""
    text = text.strip().rstrip(";")
    try:
        python = _to_python(text, names)
        if python is None or not python.strip():
            return None
        value = _eval_node(ast.parse(python, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, OverflowError, RecursionError, MemoryError):
        return None
    width = _unsigned_width(text)
    return value % (1 << width) if width else value


def resolve(definitions: dict[str, str]) -> dict[str, int]:
    """Values of every definition (name -> C expression text) that evaluates, in any order."""
    values: dict[str, int] = {}
    pending = dict(definitions)
    while pending:
        progress = False
        for name, text in list(pending.items()):
            value = evaluate(text, values)
            if value is not None:
                values[name] = value
                del pending[name]
                progress = True
        if not progress:
            break
    return values
