import torch
from polyrec.hardware import calibrate
m, n, k = 65536, 3456, 512
dlow = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
v = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
vt = v.t().contiguous()
dlow_t = dlow.t().contiguous()
grad = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
out = grad.clone()
ref = torch.addmm(grad.float(), dlow.float(), v.float())
import json, os
res = []
for name, fn in (("NN addmm_ (today)", lambda: out.addmm_(dlow, v)),
                 ("B transposed copy: addmm_(dlow, vt.t())", lambda: out.addmm_(dlow, vt.t())),
                 ("A transposed copy: addmm_(dlow_t.t(), v)", lambda: out.addmm_(dlow_t.t(), v)),
                 ("both transposed", lambda: out.addmm_(dlow_t.t(), vt.t())),
                 ("C^T = V^T dlow^T + G^T (out^T view)", lambda: out.t().addmm_(vt, dlow_t)),
                 ("no C: mm", lambda: torch.mm(dlow, v)),
                 ("no C: mm B^T", lambda: torch.mm(dlow, vt.t()))):
    out.copy_(grad); fn(); torch.cuda.synchronize()
    if "no C" not in name:
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
    else:
        err = 0
    ms = calibrate.steady_ms(fn)
    print(f"{name:45s} {ms:.4f} ms {2*m*n*k/ms/1e9:.0f} TFLOP/s err {err:.1e}", flush=True)
    res.append({"name": name, "steady_ms": ms, "rel_err": err})
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    for fn in (lambda: out.addmm_(dlow, v), lambda: out.addmm_(dlow, vt.t()), lambda: out.t().addmm_(vt, dlow_t)):
        fn()
    torch.cuda.synchronize()
kernels = {e.key: e.device_time_total / 1e3 for e in prof.key_averages() if "nvjet" in e.key}
print(kernels)
json.dump({"steady": res, "profiler_one_call_ms": kernels}, open(os.environ.get("OUT", ".") + "/dgrad_layout.json", "w"), indent=1)
