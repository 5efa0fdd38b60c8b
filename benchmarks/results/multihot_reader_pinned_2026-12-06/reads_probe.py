"""The reader alone, as the read-ahead thread reads for CUDA (pinned) and plain, in this tree (prints one JSON line)."""
import json, statistics, sys
sys.path.insert(0, "benchmarks")
from multihot_reader import time_reader
spec = sys.argv[1]
out = {"tree": sys.argv[2]}
for pinned in (True, False):
    r = time_reader(spec, 65536, 10, pinned=pinned)
    out["pinned_ms" if pinned else "plain_ms"] = round(statistics.median(r) * 1e3, 2)
print(json.dumps(out), flush=True)
