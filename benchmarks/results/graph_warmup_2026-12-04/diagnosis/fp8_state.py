"""Graphed fp8 dcnv2-small: the Fp8Scaling states and per-step grads norms (run under main or the V^T polyrec)."""
import torch
import polyrec
from polyrec.kernels.fp8 import Fp8Scaling
from polyrec.runtime import TrainConfig, Trainer
torch.set_printoptions(precision=4, linewidth=200, sci_mode=True)
cfg = TrainConfig(preset="dcnv2-small", data="synthetic:uniform", batch_size=2048, steps=8, device="cuda",
                  embedding_backend="polyrec", dense_backend="polyrec", precision="fp8", log_every=10**9, cuda_graphs="auto")
t = Trainer(cfg, progress=False)
print(polyrec.__file__)
for step in range(3):
    batch = t.source.next_batch().to(t.rt.device)
    emb = t.model.embed(batch.values, batch.offsets, batch.batch_size)
    loss, emb_grad = t._dense_step(batch, emb)
    torch.cuda.synchronize()
    norms = {n.replace("parts.", ""): round(float(p.grad.norm()), 5) for n, p in t.dense_loss.named_parameters() if p.grad is not None}
    print("step", step, "loss", round(float(loss), 4), "emb_grad", round(float(emb_grad.norm()), 5), norms)
    for name, m in t.model.named_modules():
        if isinstance(m, Fp8Scaling):
            print("  ", name, m.kinds)
            print("     history[:, :3]", m.history[:, :3].flatten().tolist())
            print("     scales", m.scales.tolist())
    t._embedding_backward(emb, emb_grad)
    t._optimizer_step()
