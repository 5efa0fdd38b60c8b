"""CPU, no calibration (POLYREC_CACHE_DIR at an empty directory): the planner's eager host, graphed host
and device ms (``polyrec.runtime.graphs.predicted_ms``, the H200 catalog entry) for graphs_auto_check's
configs, beside that run's measured eager and graphed steps."""
import json
from types import SimpleNamespace

import torch

import polyrec.hardware.detect as detect
from polyrec.hardware.catalog import get_device
from polyrec.models import preset
from polyrec.runtime import TrainConfig, graphs

h200 = get_device("H200")
detect.detect = lambda index=0: SimpleNamespace(spec=h200)
rt = SimpleNamespace(device=torch.device("cuda"), embedding_backend="polyrec", dense_backend="polyrec",
                     compute_dtype=torch.bfloat16)
for r in json.load(open("benchmarks/results/graphs_auto_check_nvidia-h200_2026-12-01.json"))["rows"]:
    model = preset(r["preset"]).with_capped_rows(4_000_000)
    p = graphs.predicted_ms(TrainConfig(preset=r["preset"], batch_size=r["batch"], row_cap=4_000_000), rt, model)
    print(f"{r['preset']:20s} {r['batch']:6d}  predicted host {p.host_ms:5.2f} graphed {p.graphed_host_ms:5.2f} "
          f"device {p.device_ms:5.2f} ms | measured eager {r['eager_ms']:5.2f} graphed {r['graphed_ms']:5.2f} ms")
