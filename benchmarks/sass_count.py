"""Static SASS of the embedding kernels on cuda:90, compiled on the CPU (no GPU): registers per thread,
resident warps per SM they allow, and instructions by kind. This is how the lane update's issue floor
(``perfmodel.tbe.LANE_INSTRUCTIONS``) and its register budget were read, and how a kernel change can be
checked before any device time: fewer instructions per tile, or more resident warps.

    .venv/bin/python benchmarks/sass_count.py [--match "update-lane rowwise_adagrad fp32 D128"]
        [--set HAS_WD=0 --set HAS_SCALE=0] [--weights fp16] [--maxnreg 112] [--json]

``--match``: a substring of ``tbe_compile.compile_jobs`` labels (every distinct match is compiled);
``--set``: a constexpr overridden in every matched job (the compile jobs turn every option on; the
MLPerf step runs without weight decay or per-sample scales). The counts are
static (each instruction once, whatever the loop trip counts), except ``loop path``: one trip of the
kernel's loop on its common path (``loop_path``). ``--dump DIR`` writes each job's SASS.
``--lane-grid``: instead of ``--match``, the lane update at every layout the selector can launch (``lane_grid``).
Run with TRITON_INTERPRET unset. Writes ``sass_count_cpu_<date>.json`` with ``--save`` (``sass_count_lane_grid_*``).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import subprocess
import tempfile
from pathlib import Path

#: Registers per SM on sm_90 (NVIDIA H100/H200: 64K 32-bit registers per SM), allocated per warp in
#: units of 256 (CUDA occupancy calculator: register allocation unit size 256, warp granularity).
SM90_REGISTERS = 65536
REGISTER_UNIT = 256
#: Opcode kinds (the SASS opcode's stem, before the first dot).
KINDS = {
    "load": ("LDG", "LD", "LDS", "LDC", "LDL", "ULDC"),
    "store": ("STG", "ST", "STS", "STL", "RED", "ATOM", "ATOMG"),
    "shuffle": ("SHFL",),
    "predicate": ("ISETP", "FSETP", "DSETP", "PLOP3", "P2R", "R2P", "SEL", "FSEL", "VOTE", "VOTEU"),
    "integer": ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "IMNMX", "IABS", "FLO", "POPC", "BREV", "PRMT", "SGXT"),
    "float": ("FADD", "FMUL", "FFMA", "FMNMX", "MUFU", "F2F", "F2I", "I2F", "HADD2", "HMUL2", "HFMA2", "F2FP"),
    "move": ("MOV", "UMOV", "S2R", "S2UR", "CS2R", "R2UR", "IMAD.MOV"),
    "control": ("BRA", "EXIT", "BAR", "BSSY", "BSYNC", "WARPSYNC", "NOP", "CALL", "RET", "DEPBAR"),
}


def _kind(opcode: str) -> str:
    stem = opcode.split(".")[0]
    for kind, stems in KINDS.items():
        if stem in stems or opcode in stems:
            return kind
    return "uniform" if stem.startswith("U") else "other"


def _nvdisasm(cubin: bytes) -> str:
    import triton

    tool = Path(triton.knobs.nvidia.cuobjdump.path).with_name("nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(tool), "-c", str(path)], capture_output=True, text=True, check=True).stdout


def count_sass(sass: str) -> dict[str, int]:
    """Instructions by kind in nvdisasm text (one per line ``/*addr*/ [@P] OPCODE ...;``)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            counts[_kind(m.group(1))] += 1
    counts["total"] = sum(counts.values())
    return dict(counts)


def _label_lines(lines: list[str]) -> dict[str, int]:
    return {m.group(1): n for n, line in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", line))}


def _is_instruction(line: str) -> bool:
    return re.match(r"\s*/\*[0-9a-f]+\*/\s+\S", line) is not None


def _target(line: str) -> str | None:
    m = re.search(r"BRA `?\((\.L_x_\d+)\)", line)
    return m.group(1) if m else None


def loop_path(sass: str) -> int | None:
    """Instructions one trip of the last loop issues on its common path: from the loop's head to its
    back-edge, leaving out the rare block of its first conditional forward branch: the block the branch jumps
    to (up to where that block's alternative rejoins), or, where the fall-through has no jump of its own (an
    if-then), the fall-through the branch jumps over. The lane update's first branch is the per-key table lookup
    of a tile at a table's edge (``_sorted_table_fields``), so this is its per-tile count; ptxas lays it out
    either way (BLOCK_D 128: the lookup at the target; 16: falling through). Checked against Nsight Compute's
    executed instructions: 1.00-1.13x the count at BLOCK_D 16-256 since the if-then case, 0.25-0.32x at 16
    before (benchmarks/results/lane_ncu_2026-12-07/). None without a loop."""
    lines = sass.splitlines()
    labels = _label_lines(lines)
    back = [n for n, line in enumerate(lines) if "@" in line and _target(line) and labels[_target(line)] < n]
    if not back:
        return None
    head, end = labels[_target(lines[back[-1]])], back[-1]
    branches = [n for n in range(head, end) if "@" in lines[n] and _target(lines[n])
                and labels[_target(lines[n])] > n]
    if not branches:
        return sum(map(_is_instruction, lines[head:end + 1]))
    taken = labels[_target(lines[branches[0]])]
    jumps = [n for n in range(branches[0], taken) if _target(lines[n]) and "@" not in lines[n]]
    if not jumps:  # no alternative: the branch jumps over the rare block, to the common path
        return sum(map(_is_instruction, lines[head:branches[0] + 1])) + sum(map(_is_instruction, lines[taken:end + 1]))
    join = labels[_target(lines[jumps[0]])]
    return sum(map(_is_instruction, lines[head:jumps[0] + 1])) + sum(map(_is_instruction, lines[join:end + 1]))


def resident_warps(registers: int, warps_per_block: int) -> int:
    """Warps per SM that the registers allow (whole blocks; sm_90 allocation rounding)."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    return SM90_REGISTERS // (per_warp * warps_per_block) * warps_per_block


def analyse(job, dump: Path | None) -> dict:
    from polyrec.hardware.catalog import get_device
    from polyrec.hardware.compile import _nvidia_resources, compile_job

    compiled = compile_job(job, get_device("H200"))  # cuda:90
    registers, spills = _nvidia_resources(compiled.asm["cubin"])
    sass = _nvdisasm(compiled.asm["cubin"])
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / (re.sub(r"[^A-Za-z0-9_.-]+", "_", job.label) + ".sass")).write_text(sass)
    return {"label": job.label, "registers": registers, "spill_bytes": spills, "warps_per_block": job.num_warps,
            "resident_warps": resident_warps(registers, job.num_warps), "loop_path": loop_path(sass),
            **count_sass(sass)}


def with_weights(job, dtype: str):
    """``job`` compiled for rows of ``dtype`` ("fp32", "fp16", "bf16"): the weights pointer's type, stochastic
    rounding on for the half precisions where the kernel has it, and the label renamed."""
    signature = {k: (f"*{dtype}" if k == "weights_ptr" else v) for k, v in job.signature.items()}
    if "weights_ptr" not in signature:
        raise SystemExit(f"{job.label}: no weights_ptr to retype")
    constexprs = dict(job.constexprs)
    if "STOCHASTIC" in constexprs:
        constexprs["STOCHASTIC"] = dtype != "fp32"
    label = re.sub(r"\b(fp32|fp16|bf16)\b", dtype, job.label, count=1)
    return dataclasses.replace(job, signature=signature, constexprs=constexprs, label=label)


def with_register_cap(job, cap: int):
    """``job`` compiled with ptxas's register cap ``cap`` (``maxnreg``) instead of its own, the label saying so."""
    label = re.sub(r" maxnreg\d+", "", job.label) + f" maxnreg{cap}"
    return dataclasses.replace(job, options={**job.options, "maxnreg": cap}, label=label)


#: BLOCK_D of the lane update's layouts ``--lane-grid`` compiles (one dim group's padded width), each at every TILE
#: of ``tbe_select.LANE_TILES``.
LANE_GRID_BLOCK_D = (16, 32, 64, 128, 256, 512)
#: The compile job ``--lane-grid`` varies: the lane update of one dim group of mixed dims.
LANE_GRID_BASE = "tbe update-lane rowwise_adagrad fp32 D32 mixed grouped128 tile32 chunks8 w1"


def lane_grid(jobs: dict) -> list:
    """The lane update at every layout the selector can launch: of mixed dims (one dim group's launch, ``GROUPED``)
    for every optimizer, and of one dim (``ONE_DIM``) for those without a per-element state tile, at each BLOCK_D of
    LANE_GRID_BLOCK_D and TILE of ``tbe_select.LANE_TILES``, with the selector's warps and register cap; fp32 rows,
    no weight decay or per-id scales (the MLPerf step's)."""
    from polyrec.kernels import tbe_select
    from polyrec.kernels.tbe_optim import OPTIM_CODE, STATE_PER_ELEMENT

    if LANE_GRID_BASE not in jobs:
        raise SystemExit(f"--lane-grid: no compile job {LANE_GRID_BASE!r} (tbe_compile.compile_jobs) to vary")
    base = jobs[LANE_GRID_BASE]
    out = []
    for one_dim in (False, True):
        for optimizer, state_tiles in STATE_PER_ELEMENT.items():
            if one_dim and state_tiles:
                continue
            for block_d in LANE_GRID_BLOCK_D:
                for tile in tbe_select.LANE_TILES:
                    warps = tbe_select.lane_warps(block_d, 32)
                    constexprs = {**base.constexprs, "OPTIM": OPTIM_CODE[optimizer], "BLOCK_D": block_d, "TILE": tile,
                                  "HAS_WD": 0, "HAS_SCALE": 0, "ONE_DIM": block_d if one_dim else 0,
                                  "GROUPED": not one_dim}
                    job = dataclasses.replace(base, constexprs=constexprs, num_warps=warps, label=(
                        f"lane {'one dim' if one_dim else 'mixed grouped'} {optimizer} D{block_d} tile{tile} w{warps}"))
                    cap = tbe_select.lane_register_cap("nvidia", tbe_select.LANE_CHUNKS, tile, state_tiles, one_dim)
                    out.append(with_register_cap(job, cap) if cap else job)
    return out


def per_element(row: dict, job) -> float | None:
    """Thread instructions per tile element of one trip of the loop path (warp instructions x 32 lanes x warps over
    TILE x BLOCK_D), as ``perfmodel.tbe.LANE_INSTRUCTIONS`` counts them; None for a kernel without a loop or a tile."""
    if row["loop_path"] is None or not {"TILE", "BLOCK_D"} <= job.constexprs.keys():
        return None
    return row["loop_path"] * 32 * job.num_warps / (job.constexprs["TILE"] * job.constexprs["BLOCK_D"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", default="update-lane rowwise_adagrad fp32 D128",
                        help="substring of the compile-job labels to analyse")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=INT",
                        help="override a constexpr of the matched jobs (repeatable)")
    parser.add_argument("--weights", choices=("fp32", "fp16", "bf16"),
                        help="compile the matched jobs with rows of this dtype (STOCHASTIC on for fp16 / bf16); the "
                             "compile jobs hold fp32 and bf16 rows only")
    parser.add_argument("--maxnreg", type=int, help="compile the matched jobs with this register cap (ptxas "
                        "maxnreg) instead of their own")
    parser.add_argument("--dump", type=Path, help="write each job's SASS into this folder")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/sass_count_cpu_<date>.json")
    parser.add_argument("--lane-grid", action="store_true",
                        help="instead of --match: the lane update at every optimizer, BLOCK_D and TILE "
                             "(``lane_grid``), with instructions per tile element")
    args = parser.parse_args()
    from polyrec.hardware.catalog import get_device
    from polyrec.kernels.tbe_compile import compile_jobs

    overrides = {k: int(v) for k, v in (item.split("=", 1) for item in args.set)}
    if args.lane_grid:
        jobs = lane_grid({j.label: j for j in compile_jobs(get_device("H200"))})
    else:
        jobs = {j.label: j for j in compile_jobs(get_device("H200")) if args.match in j.label}
        jobs = list(jobs.values())
    jobs = [dataclasses.replace(j, constexprs={**j.constexprs, **overrides}) for j in jobs]
    if args.weights:
        jobs = [with_weights(j, args.weights) for j in jobs]
    if args.maxnreg:
        jobs = [with_register_cap(j, args.maxnreg) for j in jobs]
    if not jobs:
        raise SystemExit(f"no compile job label contains {args.match!r}")
    rows = []
    for job in jobs:
        rows.append(analyse(job, args.dump))
        rows[-1]["per_element"] = per_element(rows[-1], job)
    if args.save:
        from polyrec.results import write_results
        write_results("sass_count" + ("_lane_grid" if args.lane_grid else ""), {"rows": rows}, rows=rows,
                      summary={"target": "cuda:90", "match": "lane grid" if args.lane_grid else args.match,
                               "overrides": overrides})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    kinds = ["total"] + list(KINDS) + ["uniform", "other"]
    print("| job | regs | warps/SM | loop path | per element | " + " | ".join(kinds) + " |")
    print("|---" * (len(kinds) + 5) + "|")
    for r in rows:
        each = "-" if r["per_element"] is None else f"{r['per_element']:.2f}"
        print(f"| {r['label']} | {r['registers']} | {r['resident_warps']} | {r['loop_path']} | {each} | "
              + " | ".join(str(r.get(k, 0)) for k in kinds) + " |")


if __name__ == "__main__":
    main()
