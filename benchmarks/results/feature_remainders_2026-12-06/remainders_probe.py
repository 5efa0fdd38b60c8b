"""feature_remainders alone on the device: the base checkout's (a repeat_interleave'd per-id divisor) against the
change's (a scalar per feature, int32 arithmetic), on an MLPerf multi-hot batch of int32 ids as read."""
import importlib.util, json, os, statistics, sys
import numpy as np, torch
from polyrec.models.config import preset
from polyrec.data.types import feature_remainders as new_fn

spec = importlib.util.spec_from_file_location("base_types", sys.argv[1])
base = importlib.util.module_from_spec(spec); sys.modules["base_types"] = base; spec.loader.exec_module(base)
old_fn = base.feature_remainders
cfg = preset("mlperf-dcnv2"); B = 65536
counts = [h * B for h in cfg.multi_hot]
bounds = tuple(int(x) for x in np.concatenate([[0], np.cumsum(counts)]))
rows = torch.tensor(cfg.table_rows, dtype=torch.int64)
g = torch.Generator(device="cuda").manual_seed(0)
values = torch.randint(0, 2**31 - 1, (bounds[-1],), dtype=torch.int32, device="cuda", generator=g)
calls = {"base": lambda: old_fn(values, rows, bounds, True), "change": lambda: new_fn(values, rows, bounds)}
ref = calls["base"](); assert torch.equal(ref, calls["change"]()), "results differ"
del ref
res = {k: [] for k in calls}; peak = {}
for name, f in calls.items():
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
    out = f(); torch.cuda.synchronize(); peak[name] = (torch.cuda.max_memory_allocated() - before) / 1e6; del out
for _ in range(20):
    for name, f in calls.items():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); out = f(); e.record(); torch.cuda.synchronize(); res[name].append(s.elapsed_time(e)); del out
summary = {k: {"ms_median": statistics.median(v), "ms_min": min(v), "peak_extra_MB": peak[k]} for k, v in res.items()}
summary["ids"] = bounds[-1]; summary["gpu"] = torch.cuda.get_device_name()
print(json.dumps(summary, indent=1))
os.makedirs(os.environ["OUT"] + "/remainders", exist_ok=True)
json.dump({"summary": summary, "ms": res}, open(os.environ["OUT"] + "/remainders/remainders_probe.json", "w"), indent=1)
