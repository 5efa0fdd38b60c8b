"""Python hazards, found with the ``ast`` module (rules PM101, PM103, PM110, PM2xx).

What already works on ROCm is never flagged: torch.cuda.* device APIs, torch.cuda.nvtx, the "nccl"
backend name, device="cuda". A check guarded by a ROCm test (an enclosing ``if`` or boolean expression
that mentions ``hip`` / ``rocm``) counts as handled.
"""

from __future__ import annotations

import ast
import io
import operator
import re
import tokenize
from dataclasses import dataclass
from polyrec.migrate.rules import AMD_MAX_WORKGROUP, AMD_WAVEFRONT
from polyrec.migrate.types import Finding, text_column
from polyrec.migrate.wrappers import NumWarpsWrappers, dotted, num_warps_wrappers, sinks

# hip / rocm as a whole identifier part (torch.version.hip, IS_ROCM, use_rocm, isHip), never inside
# another word (num_chips, FLASHCHIP); fnuz anywhere (float8_e4m3fnuz).
_HIP_WORD = re.compile(r"(?<![A-Za-z0-9])(?i:hip|rocm)(?![a-z0-9])|(?<=[a-z0-9])(?:Hip|HIP|Rocm|ROCm|ROCM)(?![a-z0-9])|"
                       r"(?i:fnuz)")
_WARP_SIZE_NAME = re.compile(r"warp_?size|warp_?sz|threads_?per_?warp|lanes_?per_?warp|^k_?warp$", re.IGNORECASE)
_WARPS_NAME = re.compile(r"warp", re.IGNORECASE)
# A name's words: split at "_", before a capital that starts a lower-case word (kWarpSize: k, Warp, Size) and
# between letters and digits; compared lower-cased.
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# Words that make a "warp" name bound to 32 something other than a warp's width: a warp tile's extent (WARP_M = 32,
# WARP_TILE_N in a GEMM's warp-level tiling) or an index. Left out so that tilings do not flood the report.
_WARP_TILE_WORDS = frozenset({"m", "n", "k", "tile", "tiles", "shape", "id", "idx", "index"})
# The other words of a count of warps per program (NUM_WARPS, n_warps, WARPS_PER_BLOCK, MAX_WARPS): a launch's
# num_warps. Other plural names (WARPS_PER_SM: a hardware occupancy figure) are left alone.
_WARP_COUNT_WORDS = frozenset({"num", "n", "warps", "per", "block", "cta", "program", "max", "default"})
# A PTX instruction: an opcode with dotted modifiers (cvt.rn.f16.f32, tanh.approx.f32) before its first operand
# ($0 in Triton's asm, %r1, [addr] or {a, b}); AMDGCN mnemonics join their parts with "_" (v_exp_f32), not ".".
_PTX = re.compile(r"(?:^|[\s;{])[a-z][a-z0-9]*(?:\.[a-z0-9]+)+\s+[$%\[{]|\.reg\s+\.|%laneid")
_PTX_APPROX = re.compile(r"\b[a-z][a-z0-9]*\.approx\b")
_AMDGCN = re.compile(r"\b[vs]_[a-z0-9_]+\b")
_CUPY_CUDA_ONLY = re.compile(r"\basm\s*(volatile\s*)?\(|__shfl\w*_sync\s*\(\s*0x[fF]{8}\b|__ballot_sync|"
                             r"__activemask|%laneid|cuda_fp8\.h|__nv_fp8|cuda/barrier|cuda/pipeline")
# The operators of a constant integer expression read as its value (WARP = 16 * 2, WARP_SIZE = 1 << 5).
_INT_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.LShift: operator.lshift}
# Bits a constant may be shifted by and still be read (1 << 5 is a warp size; 1 << 10 ** 9 would only eat memory).
_MAX_SHIFT = 64
# An object-like #define of an integer literal in CUDA source text (#define FULL_MASK 0xffffffff): read as the literal
# wherever its name is used, as the CUDA scan reads it.
_INT_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)[ \t]*"
                         r"(?://.*|/\*.*)?$", re.MULTILINE)
_FP8_OCP = {"float8_e4m3fn", "float8_e5m2", "float8e4nv", "float8e5"}
_CUDA_PYTHON = ("cuda.bindings", "cuda.core", "cuda.cuda", "cuda.cudart", "cuda.nvrtc")
_NVML_MODULES = ("pynvml", "nvidia_smi", "py3nvml")


def _int_constant(node: ast.AST) -> int | None:
    """The value of an integer literal or of + - * << on such (``16 * 2``, ``1 << 5``); None for anything else."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if not (isinstance(node, ast.BinOp) and type(node.op) in _INT_OPS):
        return None
    left, right = _int_constant(node.left), _int_constant(node.right)
    if left is None or right is None or (isinstance(node.op, ast.LShift) and not 0 <= right <= _MAX_SHIFT):
        return None
    return _INT_OPS[type(node.op)](left, right)


def _product_pools(node: ast.expr, width: int) -> list[ast.expr] | None:
    """The iterable each element comes from of the ``width``-tuples that ``itertools.product(a, b)`` or
    ``product(a, b, repeat=n)`` yields (``[a, b] * n``); None for another call or another width."""
    if not (isinstance(node, ast.Call) and dotted(node.func) in ("itertools.product", "product")) or \
            not node.args or any(isinstance(a, ast.Starred) for a in node.args):
        return None
    repeats = [_int_constant(kw.value) if kw.arg == "repeat" else None for kw in node.keywords] or [1]
    if len(repeats) != 1 or repeats[0] is None or len(node.args) * repeats[0] != width:
        return None
    return node.args * repeats[0]


def _expand_int_defines(code: str) -> str:
    """CUDA source ``code`` with each name #defined as an integer literal replaced by that literal."""
    values = dict(_INT_DEFINE.findall(code))
    if not values:
        return code
    return re.sub(rf"\b(?:{'|'.join(map(re.escape, values))})\b", lambda m: values[m.group(0)], code)


def _name_words(name: str) -> set[str]:
    """A constant's words, lower-cased, the ``k`` prefix of ``kWarpSize`` dropped."""
    return {w.lower() for w in _WORDS.findall(re.sub(r"^k(?=[A-Z])", "", name))}


def is_warp_width_name(name: str) -> bool:
    """Whether a constant named ``name`` holds a warp's width (WARP_SIZE, WARP, kWarpThreads, LANES_PER_WARP), not a
    warp tiling's extent or an index (WARP_M, WARP_TILE_N, WARP_ID). The CUDA scan reads names the same way."""
    words = _name_words(name)
    return bool(_WARP_SIZE_NAME.search(name)) or ("warp" in words and not words & _WARP_TILE_WORDS)


def _mentions_hip(node: ast.AST) -> bool:
    return bool(_HIP_WORD.search(ast.unparse(node)))


def _is_capability_source(node: ast.AST, properties_names: set[str]) -> bool:
    """get_device_capability(...)[i], or .major / .minor of get_device_properties(...) or of a name bound to it."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call):
        return dotted(node.func).endswith("get_device_capability")
    if isinstance(node, ast.Attribute) and node.attr in ("major", "minor"):
        inner = node.value
        return (isinstance(inner, ast.Call) and dotted(inner.func).endswith("get_device_properties")) or \
            (isinstance(inner, ast.Name) and inner.id in properties_names)
    return False


def _onward(chain: tuple[str, ...]) -> str:
    """The wrappers a value goes through on its way to a launch, for a message: `` to outer() to run()``."""
    return "".join(f" to {label}" for label in chain)


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], tree: ast.AST, wrappers: NumWarpsWrappers) -> None:
        self.path, self.lines = path, lines
        self.findings: list[Finding] = []
        self.guard = 0  # depth of enclosing ROCm-aware conditionals
        self.capability_names: set[str] = set()  # names bound to expressions that read the capability
        self.properties_names: set[str] = set()  # names bound from get_device_properties()
        self.file_has_fnuz = any(isinstance(n, ast.Attribute) and ("fnuz" in n.attr or n.attr == "float8e4b8")
                                 for n in ast.walk(tree))
        self.str_constants: dict[str, str] = {}
        self.loop_ints: dict[str, list[ast.expr]] = {}  # loop variables over integer literals -> the literals
        self.int_lists: dict[str, ast.expr] = {}  # names bound to a list/tuple/set literal (WARPS = [4, 32])
        self.reported_loop_ints: set[int] = set()  # ids of those literals already reported
        self.wrappers = wrappers  # functions that pass a value on as a launch's num_warps

    def add(self, rule: str, node: ast.AST, message: str) -> None:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        self.findings.append(Finding(rule=rule, path=self.path, line=line,
                                     column=text_column(text, getattr(node, "col_offset", 0)), message=message,
                                     snippet=text.strip()[:200]))

    def _guarded_visit(self, node: ast.AST, test: ast.AST) -> None:
        guarded = _mentions_hip(test)
        self.guard += guarded
        self.generic_visit(node)
        self.guard -= guarded

    def visit_If(self, node: ast.If) -> None:
        self._check_test(node.test)
        self._guarded_visit(node, node.test)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._check_test(node.test)
        self._guarded_visit(node, node.test)

    def visit_While(self, node: ast.While) -> None:
        self._check_test(node.test)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._check_test(node.test)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self._guarded_visit(node, node)

    def _check_test(self, test: ast.AST) -> None:
        if self.guard or _mentions_hip(test):
            return
        for sub in ast.walk(test):
            if dotted(sub) == "torch.version.cuda":
                self.add("PM203", sub, "branch on torch.version.cuda: it is None on ROCm, so AMD GPUs take "
                                       "the non-CUDA branch")
                return

    def visit_Assign(self, node: ast.Assign) -> None:
        self._bind(node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._bind([node.target], node.value)
        self.generic_visit(node)

    def _bind(self, targets: list[ast.expr], value: ast.expr) -> None:
        """What the names assigned ``value`` hold (capability, device properties, strings), and PM101 on 32 (or an
        integer expression of literals equal to it: 16 * 2, 1 << 5)."""
        names = [sub.id for target in targets for sub in ast.walk(target) if isinstance(sub, ast.Name)]
        for name in names:  # a loop over the name reads the literals (``_bind_loop``); rebound, it holds others
            self.int_lists.pop(name, None)
        if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            self.int_lists.update({target.id: value for target in targets if isinstance(target, ast.Name)})
        if isinstance(value, ast.Call) and dotted(value.func).endswith("get_device_properties"):
            self.properties_names.update(names)
        if self._holds_capability(value):
            self.capability_names.update(names)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            for target in targets:
                if isinstance(target, ast.Name):
                    self.str_constants[target.id] = value.value
        if _int_constant(value) == 32 and not self.guard:
            for target in targets:
                self._check_warp_constant(target, dotted(target))
        if isinstance(value, (ast.Compare, ast.BoolOp)):
            self._check_test(value)

    def _check_warp_constant(self, target: ast.expr | ast.arg, name: str) -> None:
        """PM101 for a name (or attribute) bound to 32 that is a warp's width (WARP_SIZE, WARP, WARP_SZ, kWarp,
        THREADS_PER_WARP), PM110 for one that is a count of warps per program (NUM_WARPS, WARPS_PER_BLOCK)."""
        last = name.split(".")[-1]
        if is_warp_width_name(last):
            self.add("PM101", target, f"{name} = 32 hard-codes the warp size; AMD wavefronts are {AMD_WAVEFRONT} wide")
        elif "warps" in (words := _name_words(last)) and words <= _WARP_COUNT_WORDS:
            self.add("PM110", target, f"{name} = 32 warps: {32 * AMD_WAVEFRONT} work-items per program on AMD "
                                      f"(limit {AMD_MAX_WORKGROUP})")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """A Triton constexpr parameter defaulting to 32 (``WARP: tl.constexpr = 32``) read as a constant of that
        name bound to 32 is; the default of a parameter passed on as a launch's num_warps read as num_warps."""
        args = node.args
        positional = args.posonlyargs + args.args
        defaults = zip(positional[len(positional) - len(args.defaults):], args.defaults)
        forwarded = self.wrappers.by_function[node]
        for arg, default in (*defaults, *zip(args.kwonlyargs, args.kw_defaults)):
            if default is None or self.guard:
                continue
            constexpr = arg.annotation is not None and dotted(arg.annotation).split(".")[-1] == "constexpr"
            if constexpr and _int_constant(default) == 32:
                self._check_warp_constant(arg, arg.arg)
            elif arg.arg in forwarded:
                onward = _onward(forwarded[arg.arg].chain)
                self._check_num_warps(default, option=arg.arg,
                                      via=f" ({node.name}()'s default, passed on{onward} as a launch's num_warps)")
        self.generic_visit(node)

    def _holds_capability(self, value: ast.expr) -> bool:
        """``value`` is the capability, or a tuple of / arithmetic on it: (p.major, p.minor), major * 10 + minor."""
        if isinstance(value, (ast.Tuple, ast.List)):
            return any(self._holds_capability(e) for e in value.elts)
        if isinstance(value, ast.BinOp):
            return self._holds_capability(value.left) or self._holds_capability(value.right)
        return _is_capability_source(value, self.properties_names) or \
            (isinstance(value, ast.Name) and value.id in self.capability_names)

    def _bind_loop(self, target: ast.expr, values: ast.expr) -> None:
        """Loop variables over integer literals (``for w in [4, 8, 32]``, ``for b, w in itertools.product([64, 128],
        [4, 32])``, ``product(..., repeat=2)``): their literals, read where one is a launch option (``num_warps=w``,
        a config space made in a loop). A loop that binds them to anything else forgets what an earlier one bound."""
        names = [target] if isinstance(target, ast.Name) else list(getattr(target, "elts", []))
        pools = [values] if isinstance(target, ast.Name) else _product_pools(values, len(names)) or [None] * len(names)
        for name, pool in zip(names, pools):
            if not isinstance(name, ast.Name):
                continue
            if isinstance(pool, ast.Name):  # WARPS = [4, 32]; for w in WARPS
                pool = self.int_lists.get(pool.id)
            if isinstance(pool, (ast.List, ast.Tuple, ast.Set)):
                self.loop_ints[name.id] = [e for e in pool.elts if _int_constant(e) is not None]
            else:
                self.loop_ints.pop(name.id, None)

    def visit_For(self, node: ast.For) -> None:
        self._bind_loop(node.target, node.iter)
        self.generic_visit(node)

    def _visit_comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        for generator in node.generators:  # bound before the element, which the AST holds first
            self._bind_loop(generator.target, generator.iter)
        self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _visit_comprehension

    def visit_Compare(self, node: ast.Compare) -> None:
        if not self.guard:
            for operand in (node.left, *node.comparators):
                if self._holds_capability(operand):
                    self.add("PM202", node, f"`{ast.unparse(node)[:80]}` compares an NVIDIA SM version; ROCm "
                                            "reports (9, 4) on MI300X and (9, 5) on MI350X")
                    break
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mult) and not self.guard:
            for a, b in ((node.left, node.right), (node.right, node.left)):
                if isinstance(a, ast.Constant) and a.value == 32 and _WARPS_NAME.search(dotted(b)):
                    self.add("PM101", node, f"`{ast.unparse(node)}` assumes 32 threads per warp; AMD "
                                            f"wavefronts are {AMD_WAVEFRONT} wide")
                    break
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if not self.guard:  # launch options kept to be passed on: kernel[grid](..., **opts), triton.Config(m, **opts)
            self._check_sinks(node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FP8_OCP and not self.guard and not self.file_has_fnuz:
            if dotted(node).split(".")[0] in ("torch", "tl", "triton", "language"):
                self.add("PM201", node, f"{dotted(node)} is the OCP fp8 format; MI300X/MI325X (gfx942) need "
                                        "the fnuz variant")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0:
            if module == "cuda":
                self.add("PM207", node, "imports NVIDIA cuda-python (from cuda import ...)")
            else:
                self._check_module(node, module)

    def _check_module(self, node: ast.AST, module: str) -> None:
        if self.guard:
            return
        top = module.split(".")[0]
        if top == "nvtx":
            self.add("PM204", node, "the nvtx package is NVIDIA-only; use torch.cuda.nvtx")
        elif top in _NVML_MODULES:
            self.add("PM205", node, f"{module} needs NVML, absent on AMD systems")
        elif module == "cuda" or module.startswith(_CUDA_PYTHON):
            self.add("PM207", node, f"imports NVIDIA cuda-python ({module})")

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted(node.func)
        if not self.guard:
            self._check_call(node, name)
        self.generic_visit(node)

    def _check_call(self, node: ast.Call, name: str) -> None:
        last = name.split(".")[-1]
        if last == "inline_asm_elementwise":
            asm = self._string_arg(node, 0, "asm")
            if asm is not None and _PTX.search(asm) and not _AMDGCN.search(asm):
                approx = _PTX_APPROX.search(asm)
                what = (f"the PTX approximate op {approx.group(0)}, which AMD GPUs lack; use tl.math (exp2, "
                        "rsqrt...), or triton.language.extra.libdevice where tl.math has none (tanh...): both lowered "
                        "for each backend, but migrate verify's CPU interpreter cannot run libdevice"
                        if approx else "PTX assembly; Triton's AMD backend cannot compile it")
                self.add("PM103", node, f"tl.inline_asm_elementwise with {what}")
        elif last in ("RawKernel", "RawModule", "ElementwiseKernel", "ReductionKernel"):
            code = self._string_arg(node, 0, "code")
            code = None if code is None else _expand_int_defines(code)
            if code is not None and _CUPY_CUDA_ONLY.search(code):
                self.add("PM206", node, f"{last} source uses CUDA-only constructs "
                                        f"({_CUPY_CUDA_ONLY.search(code).group(0).strip()})")
        else:
            self._check_sinks(node)
        if name.startswith("subprocess.") or name in ("os.system", "os.popen", "check_output", "run"):
            text = " ".join(ast.unparse(a) for a in node.args)
            if "nvidia-smi" in text:
                self.add("PM205", node, "runs nvidia-smi, absent on AMD systems")

    def _check_sinks(self, node: ast.Call | ast.Dict) -> None:
        """PM110 on what ``node`` hands on as a launch's num_warps: ``num_warps=32`` of a launch, a triton.Config or
        a dict of options, or what a call of a wrapper (``run(x, num_warps=32)``, ``op.launch(x, 32)``) gives a
        keyword that the wrapper passes on, by keyword or at its position before any ``*args``."""
        for sink in sinks(node, self.wrappers.by_name):
            if not sink.spread:
                via = f" (passed on by {sink.chain[0]}{_onward(sink.chain[1:])} as a launch's num_warps)" \
                    if sink.chain else ""
                self._check_num_warps(sink.value, option=sink.keyword, via=via)

    def _check_num_warps(self, value: ast.expr, option: str, via: str) -> None:
        """PM110 on a num_warps option's ``value``: a literal, or a loop variable over literals. ``option`` is the
        name it is given under, ``via`` how it reaches a launch where that is not num_warps itself."""
        if (warps := _int_constant(value)) is not None:
            if warps * AMD_WAVEFRONT > AMD_MAX_WORKGROUP:
                self.add("PM110", value, f"{option}={warps}{via} is {warps * AMD_WAVEFRONT} work-items on "
                                         f"AMD (limit {AMD_MAX_WORKGROUP})")
        elif isinstance(value, ast.Name):  # at the loop's literal, once however many configs use it
            for literal in self.loop_ints.get(value.id, []):
                warps = _int_constant(literal)
                if warps * AMD_WAVEFRONT > AMD_MAX_WORKGROUP and id(literal) not in self.reported_loop_ints:
                    self.reported_loop_ints.add(id(literal))
                    self.add("PM110", literal, f"{option}={value.id} takes {warps}{via}: "
                                               f"{warps * AMD_WAVEFRONT} work-items on AMD (limit {AMD_MAX_WORKGROUP})")

    def _string_arg(self, node: ast.Call, index: int, keyword: str) -> str | None:
        arg = node.args[index] if len(node.args) > index else next(
            (kw.value for kw in node.keywords if kw.arg == keyword), None)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return self.str_constants.get(arg.id)
        return None


def _decode(data: bytes) -> str:
    """Source text as Python reads it: a UTF-8 BOM or a coding cookie honoured; bad bytes replaced."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        return data.decode(encoding, "replace")
    except LookupError:
        return data.decode("utf-8", "replace")


@dataclass(frozen=True, kw_only=True, slots=True)
class ParsedPython:
    """A Python file parsed once, for each step of a scan that reads it (its wrappers, its imports, its rules)."""

    path: str  # as the scan shows it
    tree: ast.Module
    lines: list[str]  # its lines as ast numbers them


def parse_python(path: str, source: str | bytes) -> ParsedPython:
    """One file's tree and lines. Raises SyntaxError for a file ast cannot parse."""
    if isinstance(source, bytes):
        source = _decode(source)
    source = source.removeprefix("\ufeff")
    # ast numbers lines at \r\n, \r and \n only; str.splitlines() also splits at \f, \v, \x1c...
    return ParsedPython(path=path, tree=ast.parse(source, filename=path), lines=re.split(r"\r\n|\r|\n", source))


def scan_parsed(parsed: ParsedPython, wrappers: NumWarpsWrappers | None = None) -> list[Finding]:
    """Findings of every Python rule in a parsed file; ``wrappers``: its num_warps wrappers, those it imports from
    other files of the scan included (None: its own only, found here)."""
    visitor = _Visitor(parsed.path, parsed.lines, parsed.tree, wrappers or num_warps_wrappers(parsed.tree))
    visitor.visit(parsed.tree)
    return visitor.findings


def scan_python(path: str, source: str | bytes) -> list[Finding]:
    """Findings of every Python rule in one file read alone. Raises SyntaxError for a file ast cannot parse."""
    return scan_parsed(parse_python(path, source))
