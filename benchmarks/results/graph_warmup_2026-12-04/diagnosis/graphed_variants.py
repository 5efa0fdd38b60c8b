"""Run with PYTHONPATH=.scratch/vt:. : the V^T (3afd289) polyrec. Variants of the graphed fp8 dcnv2-small run."""
import sys, json, torch
import polyrec, polyrec.kernels.dcn as dcn, polyrec.kernels.gemm as gemm
from polyrec.kernels.gemm_configs import GemmConfig
from polyrec.runtime import TrainConfig, Trainer
print(polyrec.__file__)
orig = gemm.matmul
orig_dispatch = gemm._dispatch
LOG = []
MODE = {"force": None, "check": False}
CFG = GemmConfig(block_m=64, block_n=32, block_k=32, group_m=8, num_warps=4, num_stages=5)

def logged_dispatch(*args):
    out = orig_dispatch(*args)
    a, b, ta, tb = args[:4]
    LOG.append((tuple(a.shape), tuple(b.shape), ta, tb, args[7] is not None,
                torch.cuda.is_current_stream_capturing(), out[-1].backend, str(out[-1].config)))
    return out
gemm._dispatch = logged_dispatch

def wrapped(a, b, **kw):
    nt = kw.get("trans_b") and kw.get("residual") is not None
    if nt and MODE["force"] == "library":
        kw["library"] = True
    elif nt and MODE["force"] == "triton":
        kw["config"] = CFG
    ref = None
    if nt and MODE["check"] and not torch.cuda.is_current_stream_capturing():
        ref = a.double() @ b.double().t() + kw["residual"].double()
    out = orig(a, b, **kw)
    if ref is not None:
        err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
        LOG.append(("check", tuple(a.shape), kw.get("overwrite_residual"), err))
    return out
dcn.matmul = wrapped

def losses(cuda_graphs, force=None, check=False):
    MODE.update(force=force, check=check); LOG.clear()
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                      embedding_backend="polyrec", dense_backend="polyrec", precision="fp8",
                      log_every=10**9, cuda_graphs=cuda_graphs)
    t = Trainer(cfg, progress=False)
    ls = [float(t.train_step()) for _ in range(8)]
    nt = sorted({str(x) for x in LOG if x[0] == "check" or (x[3] and x[4])})
    return t.graphs.on, ls, nt

base = losses(False)
print("eager  ", [round(x, 4) for x in base[1]])
for name, args in [("graphed auto", ("auto",)), ("graphed NT->library", ("auto", "library")),
                   ("graphed NT->triton", ("auto", "triton")), ("eager NT->triton+check", (False, "triton", True))]:
    on, ls, nt = losses(*args)
    print(f"{name:24s} graphs={on} maxrel={max(abs(x-y)/abs(y) for x, y in zip(ls, base[1])):.4f}",
          [round(x, 4) for x in ls])
    for line in nt[:12]:
        print("    ", line)
