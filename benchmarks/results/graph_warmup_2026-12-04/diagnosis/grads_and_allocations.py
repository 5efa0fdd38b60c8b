"""argv: mode (losses | grads OUTFILE graphed(0/1)). Run under either polyrec (PYTHONPATH)."""
import sys, torch
import polyrec, polyrec.kernels.dcn as dcn, polyrec.kernels.gemm as gemm
from polyrec.runtime import TrainConfig, Trainer
orig = gemm.matmul
HELD = []
MODE = {"dummy": None}

def wrapped(a, b, **kw):
    if kw.get("residual") is not None and MODE["dummy"] is not None:
        d = b.t().contiguous() if MODE["dummy"] == "like_vt" else torch.ones(MODE["dummy"], device=b.device, dtype=torch.bfloat16)
        if MODE["hold"]:
            HELD[:] = [d]
        out = orig(a, b, **kw)
        return out
    return orig(a, b, **kw)
dcn.matmul = wrapped

def cfg(graphs):
    return TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                       embedding_backend="polyrec", dense_backend="polyrec", precision="fp8",
                       log_every=10**9, cuda_graphs=graphs)

def losses(graphs, dummy=None, hold=True):
    MODE.update(dummy=dummy, hold=hold); HELD.clear()
    t = Trainer(cfg(graphs), progress=False)
    return [float(t.train_step()) for _ in range(8)]

if sys.argv[1] == "losses":
    base = losses(False)
    print(polyrec.__file__)
    for name, args in [("graphed", ("auto",)), ("graphed dummy like_vt held", ("auto", "like_vt", True)),
                       ("graphed dummy like_vt freed", ("auto", "like_vt", False)),
                       ("graphed dummy 3MB held", ("auto", 1536 * 1024, True)),
                       ("eager dummy like_vt held", (False, "like_vt", True))]:
        ls = losses(*args)
        print(f"{name:30s} maxrel={max(abs(x-y)/abs(y) for x, y in zip(ls, base)):.4f}", [round(x, 4) for x in ls])
else:
    out, graphs = sys.argv[2], sys.argv[3] == "1"
    t = Trainer(cfg(graphs), progress=False)
    for _ in range(2):
        t.train_step()
    batch = t.source.next_batch().to(t.rt.device)
    emb = t.model.embed(batch.values, batch.offsets, batch.batch_size)
    t.optimizer.zero_grad(set_to_none=False)
    loss, emb_grad = t._dense_step(batch, emb)
    torch.cuda.synchronize()
    grads = {n: p.grad.detach().double().cpu().clone() for n, p in t.dense_loss.named_parameters() if p.grad is not None}
    grads["__emb_grad"] = emb_grad.detach().double().cpu()
    grads["__loss"] = loss.detach().double().cpu()
    torch.save(grads, out)
    print("saved", out, len(grads), float(loss))
