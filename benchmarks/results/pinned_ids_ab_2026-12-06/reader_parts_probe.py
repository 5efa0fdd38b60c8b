"""Where an MLPerf multi-hot batch's read time goes on this host (probe, prints only)."""
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
def timed(name, f, n=5):
    f(); s = time.perf_counter()
    for _ in range(n): r = f()
    print(f"{name}: {(time.perf_counter()-s)/n*1e3:.1f} ms", flush=True); return r
with tempfile.TemporaryDirectory() as d:
    npz = write_day(Path(d), 1 << 20, cfg.multi_hot)
    rec = multihot.MultiHotRecords([npz])
    chunk = timed("read", lambda: rec.read(0, 65536))
    good = timed("good", lambda: rec.good(chunk))
    ids = [np.asarray(x) for x in chunk.ids]
    for t in (1, 4, 8, 16):
        multihot.ID_THREADS = t
        timed(f"joined_ids threads={t}", lambda: multihot.joined_ids(ids, rows))
    multihot.ID_THREADS = min(8, os.cpu_count())
    inr = [np.asarray(x) % np.int32(min(r, 2**31 - 1)) for x, r in zip(ids, rows)]
    timed("joined_ids in-range ids", lambda: multihot.joined_ids(inr, rows))
    timed("concat int32 (no mod)", lambda: np.concatenate([x.reshape(-1) for x in ids]))
    b = 65536
    lengths = torch.tensor([x.shape[1] for x in ids], dtype=torch.int64).repeat_interleave(b)
    timed("offsets", lambda: offsets_from_lengths(lengths))
    batch = timed("whole batch()", lambda: rec.batch([(chunk, good)], rows))
    timed("pinned()", lambda: batch.pinned())
    src = open_source(f"mlperf:{npz}", cfg, batch_size=65536, seed=0, device=torch.device("cpu"))
    timed("next_batch (cpu source)", lambda: src.next_batch(), n=8)
