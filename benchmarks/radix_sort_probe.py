"""Probe (one H200 run): can a Triton LSD radix sort that carries an int32 payload beat torch.sort plus the
backward's permute on the MLPerf sort keys?

The fused backward sorts 14.0M int32 keys with torch.sort (CUB onesweep: 4 passes over the key and an int64
index, 0.55 ms, plus 0.08 of index fill and key copy) and then gathers each sorted position's gradient row
through the permutation (``permute_kernel``, 0.14 ms, a random 4-byte gather). A sort that moved the
gradient row itself as its payload would need no permute and no int64 index. Triton has no shared-memory
scatter, so each pass here scatters the (payload << 32 | key) pairs straight to global memory, one 8-byte
store per element; the stable rank within a program comes from a pairwise compare inside each CHUNK of
elements and a running per-digit count (``tl.histogram``, ``tl.gather``) across the program's chunks.
Per pass: a histogram kernel (each program's digit counts), a cumulative sum (torch) and the scatter.

Keys: the MLPerf tables' global rows of a uniform batch (``tbe.make_batch``), payload the gradient row
(feature * B + bag). Checked against torch.sort (stable). Writes ``$OUT/radix_sort_probe.json``.

    PYTHONPATH=.:benchmarks OUT=. python3 benchmarks/radix_sort_probe.py [--n N] [--device cpu]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tbe import MLPERF_HOTS, MLPERF_ROWS, make_batch  # noqa: E402

#: (digit bits, block, chunk, blocks per program V) of each configuration timed; the scatter runs V * chunk
#: / 32 warps (a chunk of 32 fills one warp's lanes).
CONFIGS = [(7, 1024, 32, 1), (7, 1024, 32, 4), (7, 1024, 32, 8), (7, 512, 32, 8), (8, 1024, 32, 4),
           (8, 2048, 32, 4), (7, 2048, 32, 8), (10, 2048, 32, 2)]
#: Warps of the histogram kernel.
HISTOGRAM_WARPS = 4
ROUNDS = 5


@triton.jit
def _digits(keys_ptr, pay_ptr, offs, mask, shift, FIRST: tl.constexpr, R: tl.constexpr):
    """(packed payload << 32 | key, its digit) of positions ``offs``; the first pass reads the two arrays."""
    if FIRST:
        key = tl.load(keys_ptr + offs, mask=mask, other=0).to(tl.int64)
        pay = tl.load(pay_ptr + offs, mask=mask, other=0).to(tl.int64)
        packed = (pay << 32) | key
    else:
        packed = tl.load(keys_ptr + offs, mask=mask, other=0)
    return packed, (((packed & 0xFFFFFFFF) >> shift) & (R - 1)).to(tl.int32)


@triton.jit
def histogram_kernel(keys_ptr, pay_ptr, counts_ptr, n, num_blocks, shift,
                     FIRST: tl.constexpr, R: tl.constexpr, BLOCK: tl.constexpr):
    """counts[d, b]: elements of program b's BLOCK whose digit is d."""
    b = tl.program_id(0)
    offs = b.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    _, d = _digits(keys_ptr, pay_ptr, offs, mask, shift, FIRST, R)
    tl.store(counts_ptr + tl.arange(0, R) * num_blocks + b, tl.histogram(d, R, mask=mask))


@triton.jit
def scatter_kernel(keys_ptr, pay_ptr, ends_ptr, counts_ptr, out_ptr, out_keys_ptr, out_pay_ptr, n, num_blocks,
                   shift, FIRST: tl.constexpr, LAST: tl.constexpr, R: tl.constexpr, BLOCK: tl.constexpr,
                   CHUNK: tl.constexpr, V: tl.constexpr):
    """Each element of the V blocks (of BLOCK) of this program to its place: its digit's start for its block
    (the exclusive sum over (digit, block) in digit-major order) plus the same digit's elements before it in
    the block. The V blocks advance together, CHUNK elements of each per step, so that a step has V * CHUNK
    loads in flight (one step loaded ahead)."""
    blocks = tl.program_id(0) * V + tl.arange(0, V)  # [V]
    idx = tl.arange(0, R)[None, :] * num_blocks + blocks[:, None]  # [V, R]
    live = (blocks < num_blocks)[:, None]
    run = tl.load(ends_ptr + idx, mask=live, other=0) - tl.load(counts_ptr + idx, mask=live, other=0)
    run = tl.reshape(run, (V * R,))  # next free place of each (block, digit)
    lane = tl.arange(0, CHUNK)
    before = (lane[None, :] < lane[:, None])[None, :, :]  # [1, CHUNK (i), CHUNK (j)]: j before i
    bin_base = (tl.arange(0, V) * R)[:, None]  # [V, 1]
    start = blocks.to(tl.int64)[:, None] * BLOCK  # [V, 1]; past the last block: >= n, so masked
    first = start + lane[None, :]
    next_packed, next_d = _digits(keys_ptr, pay_ptr, first, first < n, shift, FIRST, R)
    for c in range(BLOCK // CHUNK):
        offs = start + c * CHUNK + lane[None, :]  # [V, CHUNK]
        mask = offs < n
        packed, d = next_packed, next_d
        ahead = offs + CHUNK
        next_packed, next_d = _digits(keys_ptr, pay_ptr, ahead, (ahead < n) & (ahead < start + BLOCK), shift,
                                      FIRST, R)
        rank = tl.sum(((d[:, None, :] == d[:, :, None]) & before).to(tl.int32), axis=2)  # [V, CHUNK]
        bins = tl.reshape(bin_base + d, (V * CHUNK,))
        dest = tl.reshape(tl.gather(run, bins, 0), (V, CHUNK)) + rank
        if LAST:
            tl.store(out_keys_ptr + dest, (packed & 0xFFFFFFFF).to(tl.int32), mask=mask)
            tl.store(out_pay_ptr + dest, (packed >> 32).to(tl.int32), mask=mask)
        else:
            tl.store(out_ptr + dest, packed, mask=mask)
        run += tl.histogram(bins, V * R, mask=tl.reshape(mask, (V * CHUNK,)))


def radix_sort(keys: torch.Tensor, payload: torch.Tensor, key_bits: int, cfg) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable sort of int32 ``keys`` (non-negative, < 2^key_bits) carrying int32 ``payload``."""
    digit_bits, block, chunk, virtual = cfg
    n, r = keys.numel(), 1 << digit_bits
    passes = -(-key_bits // digit_bits)
    num_blocks = triton.cdiv(n, block)
    counts = torch.empty(r, num_blocks, dtype=torch.int32, device=keys.device)
    bufs = [torch.empty(n, dtype=torch.int64, device=keys.device) for _ in range(2)]
    out_keys, out_pay = torch.empty_like(keys), torch.empty_like(payload)
    src = keys
    for p in range(passes):
        first, last = p == 0, p == passes - 1
        histogram_kernel[(num_blocks,)](src, payload, counts, n, num_blocks, p * digit_bits, FIRST=first, R=r,
                                        BLOCK=block, num_warps=HISTOGRAM_WARPS)
        ends = torch.cumsum(counts.view(-1), 0, dtype=torch.int32)
        dst = bufs[p % 2]
        scatter_kernel[(triton.cdiv(num_blocks, virtual),)](
            src, payload, ends, counts, dst, out_keys, out_pay, n, num_blocks, p * digit_bits, FIRST=first,
            LAST=last, R=r, BLOCK=block, CHUNK=chunk, V=virtual, num_warps=virtual * chunk // 32)
        src = dst
    return out_keys, out_pay


def mlperf_keys(device: str, n_limit: int | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Global rows and gradient rows of a uniform MLPerf batch (B = 65536, or fewer ids with ``n_limit``)."""
    batch_size = 65536 if n_limit is None else max(1, n_limit // sum(MLPERF_HOTS))
    gen = torch.Generator(device=device).manual_seed(0)
    batch = make_batch(MLPERF_ROWS, MLPERF_HOTS, batch_size, False, gen)
    base = torch.tensor([0] + MLPERF_ROWS[:-1], device=device).cumsum(0)
    feat = torch.arange(len(MLPERF_HOTS), device=device).repeat_interleave(
        torch.tensor(MLPERF_HOTS, device=device) * batch_size)
    keys = (base[feat] + batch.values).to(torch.int32)
    bag = torch.cat([torch.arange(batch_size, device=device).repeat_interleave(h) for h in MLPERF_HOTS])
    src = (feat * batch_size + bag).to(torch.int32)
    return keys, src, int(sum(MLPERF_ROWS) - 1).bit_length()


def timed(fn, rounds: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(rounds):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="about this many ids instead of the full batch")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    keys, src, bits = mlperf_keys(args.device, args.n)
    ref_keys, perm = torch.sort(keys, stable=True)
    ref_pay = src[perm]
    res: dict = {"n": keys.numel(), "key_bits": bits, "rows": []}
    for cfg in CONFIGS:
        out_keys, out_pay = radix_sort(keys, src, bits, cfg)
        ok = bool(torch.equal(out_keys, ref_keys) and torch.equal(out_pay, ref_pay))
        res["rows"].append({"config": list(cfg), "equal": ok})
    if args.device == "cuda":
        def baseline():
            k, p = torch.sort(keys)
            return src[p]
        for _ in range(2):
            baseline()
        arms = {"torch.sort + gather": baseline}
        arms.update({str(cfg): (lambda c=cfg: radix_sort(keys, src, bits, c)) for cfg in CONFIGS})
        times: dict[str, list] = {name: [] for name in arms}
        for _ in range(ROUNDS):  # interleaved
            for name, fn in arms.items():
                times[name].append(timed(fn, 10))
        res["ms"] = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps(res, indent=1))
    out = Path(os.environ.get("OUT", "/tmp")) / "radix_sort_probe.json"
    out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
