"""Compile jobs of the embedding kernels: every config ``tbe_select`` can choose, for ``polyrec hw compile-check``.

Coverage: at BLOCK_D = 128 (the MLPerf dims) every forward candidate in fp32 and bf16 weights (as a
trained lookup launches it: writing the backward's sort keys too, the most registers), every
update candidate for each optimizer (fp32, plus stochastic-rounding bf16 for rowwise Adagrad, with tables of
one dim and of mixed dims: the 8-tile programs at the 152-register cap), the
merge-level kernel per optimizer at each merge chunk count (``tbe_select.MERGE_CHUNK_CHOICES``), the
sort-key kernel per forward tile and the sequence kernel; plus the largest forward and update tiles
and the merge levels at BLOCK_D = 512 (the widest rows, the most registers per thread). The update and
merge jobs at 128 address rows as tables of one dim do (``ONE_DIM``, MLPerf), those at 512 look each
tile's table up as mixed dims within one BLOCK_D do; the mixed-dims bf16 jobs at 128 and the largest
tiles at 32 are launches of one dim group (``GROUPED``: dims across several BLOCK_D).
The selector sizes warps from the tile (ELEMS_PER_THREAD per thread), so register use per thread
does not grow with BLOCK_D; the 512 jobs check that.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels import tbe_select
from polyrec.kernels.tbe_backward import PERMUTE_BLOCK, lane_update_kernel, permute_kernel, update_kernel
from polyrec.kernels.tbe_forward import (FLAG_BAD_ENDS, bag_ends_kernel, pooled_forward_kernel, sequence_forward_kernel,
                                         sort_keys_kernel)
from polyrec.kernels.tbe_merge import merge_level_kernel
from polyrec.kernels.tbe_optim import OPTIM_CODE, OPTIMIZERS, STATE_PER_ELEMENT
from polyrec.perfmodel.tbe import LEVEL_TILE

_TRITON_DTYPE = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
_SCALARS = {"batch_size": "i32", "num_bags": "i32", "nnz": "i64", "out_stride": "i64", "f": "i32", "start": "i64", "count": "i32",
            "out_row0": "i32", "rows": "i64", "base": "i64", "dim": "i32", "invalid_key": "i32", "n_pos": "i32",
            "key_lo": "i32", "key_hi": "i32", "last_feature": "i32",
            "grad_stride": "i64", "num_tables": "i32", "lr": "fp32", "eps": "fp32", "mix1": "fp32",
            "mix2": "fp32", "weight_decay": "fp32", "seed": "i32", "n_slots": "i32"}
_POINTERS = {"values_ptr": "*i64", "offsets_ptr": "*i64", "per_sample_ptr": "*fp32", "out_ptr": "*fp32",
             "flags_ptr": "*i32", "feat_ids_ptr": "*i32", "feat_table_ptr": "*i32", "feat_col_ptr": "*i32",
             "feat_mean_ptr": "*i32", "table_rows_ptr": "*i64", "table_elem_base_ptr": "*i64",
             "table_dim_ptr": "*i32", "table_key_base_ptr": "*i64", "seq_base_ptr": "*i64", "keys_ptr": "*i32",
             "src_ptr": "*i32", "scale_ptr": "*fp32", "state1_ptr": "*fp32", "state2_ptr": "*fp32",
             "grad_ptr": "*fp32", "partial_ptr": "*fp32", "perm_ptr": "*i64", "piece_start_ptr": "*i64",
             "num_pieces_ptr": "*i64", "row_base_ptr": "*i64", "elem_base_ptr": "*i64", "dim_ptr": "*i32",
             "g_off_ptr": "*i32", "sorted_scale_ptr": "*fp32", "part_key_ptr": "*i64", "part_ptr": "*fp32",
             "out_key_ptr": "*i64"}


def _signature(kernel: Any, weights: str, constexprs: dict[str, Any]) -> dict[str, str]:
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name == "weights_ptr":
            sig[name] = f"*{_TRITON_DTYPE[weights]}"
        else:
            sig[name] = _POINTERS.get(name) or _SCALARS[name]
    return sig


def _job(label: str, kernel: Any, weights: str, constexprs: dict[str, Any], num_warps: int) -> CompileJob:
    sig = _signature(kernel, weights, constexprs)
    aligned = tuple(n for n, t in sig.items() if t.startswith("*") or n == "grad_stride")  # as torch launches them
    return CompileJob(label=label, kernel=kernel, signature=sig, constexprs=constexprs, num_warps=num_warps,
                      divisible_by_16=aligned)


def _forward_jobs(spec: DeviceSpec, block_d: int, dtypes: tuple[str, ...], largest_only: bool) -> list[CompileJob]:
    cands = tbe_select.forward_candidates(block_d, spec.warp_size)
    if largest_only:
        cands = [max(cands, key=lambda c: c.bags * c.hots)]
    return [forward_job(dtype, block_d, c) for dtype in dtypes for c in cands]


def forward_job(dtype: str, block_d: int, cfg: tbe_select.ForwardConfig, trained: bool = True) -> CompileJob:
    """The pooled forward of ``dtype`` rows ("fp32", "fp16", "bf16") under ``cfg`` at ``block_d``, with
    16-byte row accesses; ``trained``: writing the backward's sort keys too (the most registers)."""
    staged = tbe_select.staged_loads(cfg)
    vec = min(16 // (4 if dtype == "fp32" else 2), block_d)
    consts = dict(BAGS=cfg.bags, HOTS=cfg.hots, BLOCK_D=block_d, VEC=vec, HAS_PER_SAMPLE=trained, HAS_MEAN=True,
                  STAGED=staged, SORT_KEYS=trained, HAS_SCALE=trained)
    return _job(f"tbe fwd {dtype} D{block_d} bags{cfg.bags} hots{cfg.hots} w{cfg.num_warps}"
                + (" staged" if staged else "") + ("" if trained else " inference"), pooled_forward_kernel, dtype,
                consts, cfg.num_warps)


#: (optimizer, row dtype) of the update jobs: every optimizer in fp32, and stochastic rounding once.
UPDATE_VARIANTS = tuple((kind, "fp32") for kind in OPTIMIZERS) + (("rowwise_adagrad", "bf16"),)
#: Why a lane update under its register cap (``tbe_select.LANE_MAX_REGISTERS*``) may spill on NVIDIA. The
#: jobs build the largest variant, with weight decay and per-id scales; under the cap that one spills
#: 24-152 B per thread on sm_90 (Triton 3.6: bf16 rows at 128 registers with one dim, bf16 rows at 152 of
#: mixed dims, the D512 updates at 152; benchmarks/results/sm90_spills_2026-12-03/). The caps were timed
#: without either, where all but two D512 builds (16-24 B) compile without a spill; with weight decay alone,
#: 16-bit rows of one dim spill 40 B at 128 and still ran 5-8.5% faster than at the spill-free 152
#: (benchmarks/results/lane_cap_2026-12-03/). Mixed dims with weight decay (80 B) and every build with
#: per-id scales are untimed.
LANE_CAP_SPILLS = "the register cap was timed without weight decay or per-id scales, and with weight decay " \
    "for one dim (tbe_select; lane_cap_2026-12-03); this build with both spills and is untimed"


def _update_jobs(spec: DeviceSpec, block_d: int, largest_only: bool, one_dim: int,
                 variants: tuple[tuple[str, str], ...] = UPDATE_VARIANTS, part_d: int = 0) -> list[CompileJob]:
    """The update and merge kernels' candidates; ``one_dim``: the tables' shared dim, 0 for mixed dims
    (``TableBatchedEmbedding.one_dim``); ``part_d`` > 0: the update as one dim group's launch (``GROUPED``)
    parking pieces of that width (the widest group's BLOCK_D)."""
    jobs, dims = [], ("" if one_dim else " mixed") + (f" grouped{part_d}" if part_d else "")
    grouped = dict(GROUPED=part_d > 0, PART_D=part_d)
    for kind, dtype in variants:
        cands = tbe_select.fitting_update_candidates(block_d, spec, STATE_PER_ELEMENT[kind], one_dim > 0)
        if largest_only:
            cands = [max((c for c in cands if c.variant == v), key=lambda c: c.tile) for v in tbe_select.UPDATE_VARIANTS]
        common = dict(OPTIM=OPTIM_CODE[kind], HAS_WD=True, STOCHASTIC=dtype != "fp32", BLOCK_D=block_d,
                      VEC=16 // (4 if dtype == "fp32" else 2), T_PAD=32)
        for c in cands:
            if c.variant == "scan":
                consts = dict(common, SEQUENCE=False, HAS_SCALE=True, TILE=c.tile, **grouped)
                kernel = update_kernel
            else:
                consts = dict(common, HAS_SCALE=True, TILE=c.tile, CHUNKS=c.chunks,
                              VEC=min(common["VEC"], tbe_select.LANE_VEC), ONE_DIM=one_dim, **grouped)
                kernel = lane_update_kernel
            chunks = f" chunks{c.chunks}" if c.variant == "lane" else ""
            cap = f" maxnreg{c.max_registers}" if c.max_registers else ""
            label = f"tbe update-{c.variant} {kind} {dtype} D{block_d}{dims} tile{c.tile}{chunks} w{c.num_warps}{cap}"
            if any(j.label == label for j in jobs):  # candidates that differ in their merge chunks alone
                continue
            job = _job(label, kernel, dtype, consts, c.num_warps)
            if c.max_registers:
                kept = LANE_CAP_SPILLS if spec.vendor == "nvidia" else ""
                job = dataclasses.replace(job, options={"maxnreg": c.max_registers}, known_spill=kept)
            jobs.append(job)
        jobs += _merge_jobs(spec, block_d, kind, dtype, common, {c.merge_chunks for c in cands}, one_dim, dims)
    return jobs


def _merge_jobs(spec: DeviceSpec, block_d: int, kind: str, dtype: str, common: dict[str, Any],
                chosen: set[int], one_dim: int, dims: str) -> list[CompileJob]:
    """The merge-level kernel at every chunk count the candidates carry or the A/B benchmark forces
    (``tbe_select.MERGE_CHUNK_CHOICES``); ``dims``: the label's mark of mixed dims."""
    warps = tbe_select.lane_warps(block_d, spec.warp_size)
    consts = dict(common, TILE=LEVEL_TILE, VEC=min(common["VEC"], tbe_select.LANE_VEC), ONE_DIM=one_dim)
    return [_job(f"tbe merge-level {kind} {dtype} D{block_d}{dims} tile{LEVEL_TILE} chunks{m} w{warps}", merge_level_kernel,
                 dtype, dict(consts, CHUNKS=m), warps)
            for m in sorted(chosen | set(tbe_select.MERGE_CHUNK_CHOICES))]


def _prep_jobs(spec: DeviceSpec, block_d: int) -> list[CompileJob]:
    jobs = []
    for c in tbe_select.forward_candidates(block_d, spec.warp_size):
        consts = dict(BAGS=c.bags, HOTS=c.hots, SEQUENCE=False, HAS_SCALE=True)
        jobs.append(_job(f"tbe sort-keys bags{c.bags} hots{c.hots} w{c.num_warps}", sort_keys_kernel, "fp32",
                         consts, c.num_warps))
    for seq in (False, True):
        jobs.append(_job(f"tbe permute sequence={seq}", permute_kernel, "fp32",
                         dict(SEQUENCE=seq, HAS_SCALE=not seq, BLOCK=PERMUTE_BLOCK), 4))
    positions = tbe_select.sequence_positions(block_d)
    warps = tbe_select.warps_for(positions * block_d, spec.warp_size)
    jobs.append(_job(f"tbe sequence D{block_d} pos{positions} w{warps}", sequence_forward_kernel, "fp32",
                     dict(POSITIONS=positions, BLOCK_D=block_d), warps))
    jobs.append(_job("tbe bag ends", bag_ends_kernel, "fp32", dict(CODE=FLAG_BAD_ENDS), 1))
    return jobs


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """The embedding kernels' configs the selector can choose on ``spec`` (see the module docstring)."""
    return (_forward_jobs(spec, 128, ("fp32", "bf16"), False) + _update_jobs(spec, 128, False, 128)
            + _update_jobs(spec, 128, False, 0, (("rowwise_adagrad", "bf16"),), part_d=128)
            + _update_jobs(spec, 32, True, 0, (("rowwise_adagrad", "fp32"),), part_d=128)
            + _prep_jobs(spec, 128) + _forward_jobs(spec, 512, ("fp32",), True) + _update_jobs(spec, 512, True, 0))
