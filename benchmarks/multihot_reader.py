"""How fast MLPerf's multi-hot days feed a training step: the reader alone, and the step on them against synthetic data.

``mlperf:DIR/day_N_sparse_multi_hot.npz`` (polyrec/data/multihot.py) builds each batch on the host from
memory-mapped files, on a background thread while the step runs (``--prefetch``, polyrec/data/prefetch.py) or on the
training thread (``--no-prefetch``). This writes one day of ``--rows`` random rows at MLPerf's widths (214 ids a row)
to a temporary folder, times ``next_batch`` alone (the day in the page cache after its first pass; and as the
read-ahead thread reads for a CUDA device: page-locked), then trains ``mlperf-dcnv2`` (tables capped at ``--row-cap``
rows, ``ROW_CAP`` by default, 0 for full size: the dense half and the batch are the full model's either way) on it
with and without prefetch (and with prefetch but its batches left in pageable memory: pinning's A/B), and on
``synthetic:uniform`` (made on the device), with ``Trainer.benchmark``: step time, its data phase, peak memory.

    PYTHONPATH=.:benchmarks python3 benchmarks/multihot_reader.py [--rows 1048576] [--steps 20] [--row-cap 0]
        [--embedding-dtype bf16]

Writes ``multihot_reader_<gpu>_<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

#: Rows per table at most: the step's dense half and batch are the full model's, in a fraction of the memory.
ROW_CAP = 4_000_000
#: Batches read before the reader's timed ones (the first pass brings the day into the page cache).
READ_WARMUP = 2


def write_day(folder: Path, rows: int, multi_hot: tuple[int, ...], seed: int = 0) -> Path:
    """Day 0 of ``rows`` random rows in MLPerf's layout under ``folder``; returns its .npz."""
    rng = np.random.default_rng(seed)
    np.save(folder / "day_0_dense.npy", rng.random((rows, 13), dtype=np.float32))
    np.save(folder / "day_0_labels.npy", rng.integers(0, 2, (rows, 1), dtype=np.int32))
    npz = folder / "day_0_sparse_multi_hot.npz"
    np.savez(npz, **{str(f): rng.integers(0, 2**31 - 1, (rows, hot), dtype=np.int32)
                     for f, hot in enumerate(multi_hot)})
    return npz


def time_reader(spec: str, batch: int, reads: int, pinned: bool = False) -> list[float]:
    """Seconds of each of ``reads`` ``next_batch`` calls on ``spec`` (host only), after READ_WARMUP; ``pinned``: as
    the read-ahead thread reads for a CUDA device (the ids written page-locked, ``Batch.pinned`` after; not the move
    to the device)."""
    import torch

    from polyrec.data import open_source
    from polyrec.models.config import preset

    source = open_source(spec, preset("mlperf-dcnv2").with_capped_rows(ROW_CAP), batch_size=batch, seed=0,
                         device=torch.device("cpu"))
    if pinned:
        source.build_pinned()
    read = (lambda: source.next_batch().pinned()) if pinned else source.next_batch
    for _ in range(READ_WARMUP):
        read()
    seconds = []
    for _ in range(reads):
        start = time.perf_counter()
        read()
        seconds.append(time.perf_counter() - start)
    return seconds


@contextlib.contextmanager
def unpinned():
    """Within: the read-ahead wrapper ``open_source`` builds leaves its batches in pageable memory (``pin`` off), as
    before the fifty-seventh session."""
    from polyrec.data import sources

    built = sources.Prefetching
    sources.Prefetching = lambda source, pin, device: built(source, pin=False)
    try:
        yield
    finally:
        sources.Prefetching = built


def time_steps(data: str, batch: int, steps: int, prefetch: bool = True, pin: bool = True,
               row_cap: int = ROW_CAP, embedding_dtype: str = "fp32") -> dict:
    """``Trainer.benchmark`` of mlperf-dcnv2 on ``data`` (GPU); ``pin``: batches read ahead page-locked; ``row_cap``
    rows per table at most (0: full size); rows of ``embedding_dtype``. The trainer's memory goes back to the device
    before the next one."""
    import torch

    from polyrec.runtime import TrainConfig, Trainer

    with contextlib.nullcontext() if pin else unpinned():
        trainer = Trainer(TrainConfig(preset="mlperf-dcnv2", data=data, batch_size=batch, steps=10**9,
                                      device="cuda", row_cap=row_cap or None, cuda_graphs=False, prefetch=prefetch,
                                      embedding_dtype=embedding_dtype),
                          progress=False)
    if prefetch and data.startswith("mlperf:") and trainer.source.pin != pin:
        raise RuntimeError(f"the read-ahead wrapper pins {trainer.source.pin}, this row asks for {pin}")
    timed = trainer.benchmark(warmup=3, steps=steps)
    trainer.source.close()
    row = {k: timed[k] for k in ("ms_per_step", "data_ms", "emb_fwd_ms", "dense_ms", "emb_bwd_ms")}
    row["peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
    del trainer
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return row


def main() -> None:
    from polyrec.models.config import preset
    from polyrec.results import write_results

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 20, help="rows in the day written")
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--reads", type=int, default=8, help="timed next_batch calls")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per data")
    parser.add_argument("--row-cap", type=int, default=ROW_CAP,
                        help="rows per table at most in the steps (0: full size)")
    parser.add_argument("--embedding-dtype", default="fp32",
                        help="embedding rows in the steps: fp32, fp16 or bf16 (full-size bf16 rows fit an 80 GB GPU)")
    args = parser.parse_args()
    multi_hot = preset("mlperf-dcnv2").multi_hot
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        spec = f"mlperf:{write_day(Path(folder), args.rows, multi_hot)}"
        print(f"wrote {args.rows} rows in {time.perf_counter() - start:.1f} s", flush=True)
        reads = time_reader(spec, args.batch, args.reads)
        pinned_reads = time_reader(spec, args.batch, args.reads, pinned=True)
        cases = [("multi-hot day, no prefetch", spec, {"prefetch": False}), ("multi-hot day, prefetch", spec, {}),
                 ("multi-hot day, prefetch unpinned", spec, {"pin": False}),
                 ("synthetic:uniform", "synthetic:uniform", {})]
        rows = [{"data": name, **time_steps(data, args.batch, args.steps, row_cap=args.row_cap,
                                            embedding_dtype=args.embedding_dtype, **how)}
                for name, data, how in cases]
    for row in rows:
        row["samples_per_s"] = args.batch / row["ms_per_step"] * 1e3
        print(row, flush=True)
    summary = {"reader_s_per_batch_median": statistics.median(reads), "reader_s_per_batch_min": min(reads),
               "reader_samples_per_s": args.batch / statistics.median(reads),
               "reader_pinned_s_per_batch_median": statistics.median(pinned_reads),
               "step_ratio_no_prefetch_vs_synthetic": rows[0]["ms_per_step"] / rows[3]["ms_per_step"],
               "step_ratio_prefetch_vs_synthetic": rows[1]["ms_per_step"] / rows[3]["ms_per_step"],
               "step_ratio_prefetch_vs_no_prefetch": rows[1]["ms_per_step"] / rows[0]["ms_per_step"],
               "step_ratio_pinned_vs_unpinned_prefetch": rows[1]["ms_per_step"] / rows[2]["ms_per_step"],
               "rows": args.rows, "batch": args.batch, "row_cap": args.row_cap,
               "embedding_dtype": args.embedding_dtype, "ids_per_row": sum(multi_hot)}
    print(summary, flush=True)
    write_results("multihot_reader", {"reads_s": reads, "pinned_reads_s": pinned_reads, "steps": rows}, rows=rows,
                  summary=summary)


if __name__ == "__main__":
    main()
