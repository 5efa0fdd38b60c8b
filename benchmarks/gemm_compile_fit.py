"""Compile-fit of the GEMM config candidates for MI350X, MI300X and H200 on the CPU (no GPU run).

Compiles every split_k = 1 candidate of the GEMM config space *before* the footprint filter (what an
exhaustive autotuner would try; AMD: ``waves_per_eu`` = 0) with the "none" and "cross" epilogues,
through ``polyrec.hardware.compile`` (Triton 3.6 ``triton.compile`` for cuda:90 / gfx942 / gfx950,
with the divisibility-by-16 specialization a real launch gets), and records the compiled registers,
spills and shared memory / LDS next to the model's ``footprint`` prediction. Summary: configs the model
says fit but spill (the dangerous kind: the selector could pick them), configs it rejects that fit,
and a least-squares fit of AMD registers = accumulator + c * step-tile registers + base over the
configs that compiled without spills (the source of ``AMD_TILE_REGISTER_FACTOR`` /
``AMD_BASE_REGISTERS`` / ``AMD_REGISTER_MARGIN`` in polyrec/perfmodel/gemm.py).

Run on the CPU with TRITON_INTERPRET unset: ``.venv/bin/python benchmarks/gemm_compile_fit.py``
(20+ minutes on 2 busy cores: ptxas is slow on the large H200 tiles); ``--quick`` compiles 4 configs per device (about 30 s).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor

from polyrec.hardware import get_device
from polyrec.kernels.gemm_configs import GemmConfig, _amd_candidates, _nvidia_candidates
from polyrec.perfmodel import gemm as model
from polyrec.results import write_results

DEVICES = ("MI350X", "MI300X", "H200")
EPILOGUES = ("none", "cross")
DTYPE = "bf16"


def candidates(device: str) -> list[GemmConfig]:
    """The unfiltered split_k = 1 candidates of a device (AMD: waves_per_eu = 0)."""
    spec = get_device(device)
    make = _amd_candidates if spec.vendor == "amd" else _nvidia_candidates
    return [c for c in make(spec, DTYPE) if c.split_k == 1 and c.waves_per_eu == 0]


def compile_one(task: tuple[str, str, GemmConfig]) -> dict:
    """Compile one (device, epilogue, config); actual resources and the model's prediction."""
    from polyrec.hardware.compile import compile_for
    from polyrec.kernels.gemm import compile_job_for

    device, epilogue, c = task
    spec = get_device(device)
    fp = model.footprint(c, DTYPE, spec, epilogue)
    row = {"device": device, "epilogue": epilogue, "config": c.label, "bm": c.block_m, "bn": c.block_n,
           "bk": c.block_k, "warps": c.num_warps, "stages": c.num_stages, "mi": c.matrix_instr_nonkdim,
           "kpack": c.kpack, "pred_registers": fp.registers, "pred_limit": fp.register_limit,
           "pred_smem": fp.smem_bytes, "pred_fits": fp.fits}
    if fp.smem_bytes > spec.smem_per_block:  # the shared-memory model is exact; ptxas takes minutes on these
        return row | {"skipped": f"shared memory {fp.smem_bytes} B > {spec.smem_per_block} B per block"}
    try:
        r = compile_for(compile_job_for(c, DTYPE, spec, epilogue=epilogue), spec)
    except Exception as exc:  # recorded, not hidden: a compile failure is a result here
        return row | {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    return row | {"registers": r.registers, "spill_bytes": r.spill_bytes, "smem": r.shared_bytes,
                  "fits": r.fits, "problems": list(r.problems)}


def register_fit(rows: list[dict], device: str, epilogue: str) -> dict:
    """Least squares: registers = acc + factor * tile + base over spill-free compiles (AMD)."""
    import numpy as np

    spec = get_device(device)
    ok = [r for r in rows if r["device"] == device and r["epilogue"] == epilogue and r.get("fits")]
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
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    opts = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("gemm_compile_fit: unset TRITON_INTERPRET (compiling needs real JIT functions)")
    start = time.perf_counter()
    tasks = []
    for device in DEVICES:
        configs = candidates(device)
        if opts.quick:
            configs = configs[:: max(1, len(configs) // 4)][:4]
        tasks += [(device, epilogue, c) for epilogue in EPILOGUES for c in configs]
    with ProcessPoolExecutor(opts.workers) as pool:
        rows = list(pool.map(compile_one, tasks, chunksize=4))
    done = [r for r in rows if "error" not in r and "skipped" not in r]
    summary = {"what": "compile-only on the CPU (Triton 3.6 cross-compilation), no GPU; AMD targets never ran",
               "compiled": len(done), "errors": sum("error" in r for r in rows),
               "skipped_over_shared_memory": sum("skipped" in r for r in rows), "wall_s": round(time.perf_counter() - start, 1)}
    for device in DEVICES:
        for epilogue in EPILOGUES:
            mine = [r for r in done if r["device"] == device and r["epilogue"] == epilogue]
            false_fit = [r["config"] for r in mine if r["pred_fits"] and not r["fits"]]
            summary[f"{device} {epilogue} predicted fit but spills/overflows"] = len(false_fit)
            summary[f"{device} {epilogue} predicted no fit but fits"] = sum(r["fits"] and not r["pred_fits"] for r in mine)
            summary[f"{device} {epilogue} false fits"] = false_fit
            if get_device(device).vendor == "amd":
                summary[f"{device} {epilogue} register fit"] = register_fit(done, device, epilogue)
    table = [{k: v for k, v in r.items() if k != "problems"} for r in rows]
    write_results("gemm_compile_fit" + ("_quick" if opts.quick else ""), {"rows": rows}, rows=table, summary=summary)
    for key, value in summary.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
