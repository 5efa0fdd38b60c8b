"""Exploration: relu_bias_backward with fp8 copies, the kernel before (column maxima per iteration) and after
(per tile element), same process, over the step's widths and a few tiles."""
import importlib.util, json, os, sys
import torch
from polyrec.hardware import calibrate
from polyrec.kernels import dense_backward as new, fp8
from polyrec.kernels.grid import ceil_div

spec = importlib.util.spec_from_file_location("old_dense_backward", ".scratch/base/polyrec/kernels/dense_backward.py")
old = importlib.util.module_from_spec(spec); sys.modules["old_dense_backward"] = old; spec.loader.exec_module(old)
units = torch.cuda.get_device_properties(0).multi_processor_count
m = 65536
scaling = fp8.Fp8Scaling([fp8.GRADIENT]).cuda()
scaling.load_state_dict({"history": torch.full((1, fp8.HISTORY_STEPS), 4.0)})
scaling.begin(True)
copy = calibrate.measure_copy_bandwidth(2 << 30)
rows = []
for n in (1024, 512, 256, 128):
    grad = torch.randn(m, n, device="cuda", dtype=torch.bfloat16); y = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    for bm, bn, w in ((64, 64, 4), (128, 64, 4), (64, 128, 4), (32, 128, 4), (128, 32, 4), (64, 64, 8)):
        it = 8
        while it > 1 and ceil_div(m, bm * it) * ceil_div(n, bn) < 4 * units:
            it //= 2
        row = {"n": n, "tile": [bm, bn, w], "iterations": it}
        for name, mod in (("old", old), ("new", new)):
            cfg = mod.DenseBackwardConfig(block_m=bm, block_n=bn, num_warps=w, rows_per_program=bm * it)
            copies = fp8.fused_out(scaling, 0, m, n, grad.device)
            row[name] = calibrate.steady_ms(lambda: mod.relu_bias_backward(grad, y, relu=True, need_bias=True,
                                                                           config=cfg, fp8=copies))
            row[name + "_of_copy"] = 6 * m * n / (row[name] * 1e-3) / copy
        rows.append(row); print(row, flush=True)
json.dump({"copy": copy, "rows": rows}, open(os.environ.get("OUT", ".") + "/relu_ab.json", "w"), indent=1)
