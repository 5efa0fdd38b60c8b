"""Where a multi-hot batch's read goes when read ahead for CUDA (page-locked ids), on this host (probe, prints only)."""
import sys, time, tempfile, os
from pathlib import Path
sys.path.insert(0, "benchmarks")
import numpy as np, torch
from multihot_reader import write_day, ROW_CAP
from polyrec.data import multihot, open_source
from polyrec.data.types import offsets_from_lengths
from polyrec.models.config import preset
cfg = preset("mlperf-dcnv2").with_capped_rows(ROW_CAP)
rows = np.array(cfg.table_rows)
print("cpus", os.cpu_count(), "ID_THREADS", multihot.ID_THREADS)
def timed(name, f, n=8):
    f(); s = time.perf_counter()
    for _ in range(n): r = f()
    print(f"{name}: {(time.perf_counter()-s)/n*1e3:.1f} ms", flush=True); return r
with tempfile.TemporaryDirectory() as d:
    npz = write_day(Path(d), 1 << 19, cfg.multi_hot)
    rec = multihot.MultiHotRecords([npz])
    chunk = timed("read", lambda: rec.read(0, 65536))
    good = timed("good", lambda: rec.good(chunk))
    timed("negative_rows", lambda: multihot.negative_rows(chunk.ids))
    ids = [np.asarray(x) for x in chunk.ids]
    n = 65536 * sum(cfg.multi_hot)
    buf = torch.empty(n, dtype=torch.int32, pin_memory=True)
    for t in (1 << 18, 1 << 19, 1 << 20, 1 << 21):
        multihot.TASK_IDS = t
        timed(f"joined_ids into pinned, TASK_IDS={t}", lambda: multihot.joined_ids(ids, rows, out=buf.numpy()))
    multihot.TASK_IDS = 1 << 20
    timed("pinned alloc 56 MB", lambda: torch.empty(n, dtype=torch.int32, pin_memory=True))
    lengths = torch.tensor(cfg.multi_hot, dtype=torch.int64).repeat_interleave(65536)
    timed("offsets", lambda: offsets_from_lengths(torch.tensor(cfg.multi_hot, dtype=torch.int64).repeat_interleave(65536)))
    rec.pinned_ids = True
    batch = timed("whole batch() pinned ids", lambda: rec.batch([(chunk, good)], rows))
    timed("Batch.pinned() of the rest", lambda: batch.pinned())
    src = open_source(f"mlperf:{npz}", cfg, batch_size=65536, seed=0, device=torch.device("cpu"))
    src.build_pinned()
    timed("next_batch + pinned()", lambda: src.next_batch().pinned(), n=12)
