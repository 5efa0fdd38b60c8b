"""Compile-fit of the GEMM configs the selector picks for the DLRM suite on MI300X and MI350X (CPU only).

For every shape of ``dlrm_suite()`` the selector's Triton config (``select_gemm`` with the shape's
epilogue and B layout; kept whatever the backend choice, since a user may force Triton) is compiled
through ``polyrec.hardware.compile`` (Triton 3.6 ``triton.compile`` for gfx942 / gfx950, with the
divisibility-by-16 specialization a real launch gets), plus the split-K reduction kernel. Each row
records the compiled registers, spills and LDS next to the model's ``footprint`` prediction. Summary:
configs that do not fit (spill / over LDS: the issue's target is zero), configs the model says fit
but do not, and a least-squares fit of AMD registers = accumulator + c * step-tile registers + base
over the spill-free compiles (a check of ``AMD_TILE_REGISTER_FACTOR`` / ``AMD_BASE_REGISTERS``).

Run on the CPU with TRITON_INTERPRET unset: ``.venv/bin/python benchmarks/gemm_compile_fit.py``
(a few minutes on 2 cores, one compile per process); ``--devices H200`` adds cuda:90 (ptxas is slow on
the large tiles); ``--quick`` compiles 4 configs per device (about 30 s).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

from polyrec.hardware import get_device
from polyrec.kernels.gemm_configs import GemmConfig, dlrm_suite
from polyrec.kernels.gemm_select import select_gemm
from polyrec.perfmodel.gemm_footprint import footprint
from polyrec.results import write_results

DEVICES = ("MI350X", "MI300X")
DTYPE = "bf16"
#: The kernel variants the compile jobs exist for: a shape's epilogue maps to one of these.
COMPILED_EPILOGUE = {"none": "none", "bias": "bias_relu", "relu": "bias_relu", "bias_relu": "bias_relu",
                     "cross": "cross"}


def selected(device: str) -> list[tuple[str, bool, GemmConfig, str]]:
    """(epilogue, B K-major, config, first shape) the selector picks for the suite, deduplicated."""
    spec = get_device(device)
    out: dict[tuple[str, bool, GemmConfig], str] = {}
    for s in dlrm_suite():
        k_major = s.layout[1] == "T"
        config = select_gemm(s.m, s.n, s.k, DTYPE, spec, epilogue=s.epilogue, b_k_major=k_major).config
        out.setdefault((COMPILED_EPILOGUE[s.epilogue], k_major, config), s.name)
    return [(e, t, c, name) for (e, t, c), name in out.items()]


def compile_one(task: tuple[str, str, bool, GemmConfig, str]) -> dict:
    """Compile one (device, epilogue, B layout, config); actual resources and the model's prediction."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_kernels import compile_job_for

    device, epilogue, trans_b, c, shape = task
    spec = get_device(device)
    fp = footprint(c, DTYPE, spec, epilogue)
    row = {"device": device, "shape": shape, "epilogue": epilogue, "trans_b": trans_b, "config": c.label,
           "bm": c.block_m, "bn": c.block_n,
           "bk": c.block_k, "warps": c.num_warps, "stages": c.num_stages, "mi": c.matrix_instr_nonkdim,
           "kpack": c.kpack, "pred_registers": fp.registers, "pred_limit": fp.register_limit,
           "pred_smem": fp.smem_bytes, "pred_fits": fp.fits}
    if fp.smem_bytes > spec.smem_per_block:  # the shared-memory model is exact; ptxas takes minutes on these
        return row | {"skipped": f"shared memory {fp.smem_bytes} B > {spec.smem_per_block} B per block"}
    try:
        r = compile_for(compile_job_for(c, DTYPE, spec, epilogue=epilogue, trans_b=trans_b), spec)
    except Exception as exc:  # recorded, not hidden: a compile failure is a result here
        return row | {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return row | {"registers": r.registers, "spill_bytes": r.spill_bytes, "smem": r.shared_bytes,
                  "fits": r.fits, "problems": list(r.problems)}


def reduce_row(device: str) -> dict:
    """Compile the split-K reduction kernel for one device."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm_kernels import reduce_compile_job

    r = compile_for(reduce_compile_job(DTYPE), get_device(device))
    return {"device": device, "shape": "split-K reduction", "epilogue": "cross", "config": "reduce",
            "registers": r.registers, "spill_bytes": r.spill_bytes, "smem": r.shared_bytes, "fits": r.fits,
            "pred_fits": True, "problems": list(r.problems)}


def register_fit(rows: list[dict], device: str) -> dict:
    """Least squares: registers = acc + factor * tile + base over spill-free "none"-epilogue compiles."""
    import numpy as np

    spec = get_device(device)
    ok = [r for r in rows if r["device"] == device and r["epilogue"] != "cross" and r.get("fits")
          and r["config"] != "reduce"]
    if len(ok) < 3:
        return {}
    threads = [r["warps"] * spec.warp_size for r in ok]
    acc = np.array([r["bm"] * r["bn"] / t for r, t in zip(ok, threads)])
    tile = np.array([(r["bm"] + r["bn"]) * r["bk"] * 2 / 4 / t for r, t in zip(ok, threads)])
    y = np.array([r["registers"] for r in ok], dtype=float) - acc
    (factor, base), *_ = np.linalg.lstsq(np.stack([tile, np.ones_like(tile)], 1), y, rcond=None)
    residual = y - (factor * tile + base)
    return {"configs": len(ok), "tile_factor": round(float(factor), 2), "base": round(float(base), 1),
            "max_under_prediction": round(float(residual.max()), 1),
            "rms": round(float(math.sqrt((residual ** 2).mean())), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 configs per device (smoke test)")
    parser.add_argument("--devices", nargs="+", default=list(DEVICES), help="catalog names")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    opts = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("gemm_compile_fit: unset TRITON_INTERPRET (compiling needs real JIT functions)")
    start = time.perf_counter()
    tasks = []
    for device in opts.devices:
        picks = selected(device)
        if opts.quick:
            picks = picks[:4]
        tasks += [(device, epilogue, trans_b, c, shape) for epilogue, trans_b, c, shape in picks]
    with ProcessPoolExecutor(opts.workers) as pool:
        rows = list(pool.map(compile_one, tasks)) + list(pool.map(reduce_row, opts.devices))
    done = [r for r in rows if "error" not in r and "skipped" not in r]
    summary = {"what": "compile-only on the CPU (Triton 3.6 cross-compilation) of the configs the selector picks "
                       "for dlrm_suite(); no GPU; AMD targets never ran",
               "compiled": len(done), "errors": sum("error" in r for r in rows),
               "skipped_over_shared_memory": sum("skipped" in r for r in rows),
               "wall_s": round(time.perf_counter() - start, 1)}
    for device in opts.devices:
        mine = [r for r in done if r["device"] == device]
        summary[f"{device} compiled"] = len(mine)
        summary[f"{device} not fitting (spills / over LDS)"] = [f"{r['config']} ({r['shape']})" for r in mine
                                                               if not r["fits"]]
        summary[f"{device} predicted fit but does not"] = sum(r["pred_fits"] and not r["fits"] for r in mine)
        summary[f"{device} max registers"] = max((r["registers"] for r in mine), default=0)
        if get_device(device).vendor == "amd":
            summary[f"{device} register fit"] = register_fit(done, device)
    table = [{k: v for k, v in r.items() if k != "problems"} for r in rows]
    write_results("gemm_compile_fit" + ("_quick" if opts.quick else ""), {"rows": rows}, rows=table, summary=summary)
    for key, value in summary.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
