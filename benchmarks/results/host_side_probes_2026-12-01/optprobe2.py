"""Where FusedAdagrad's ~1 ms of host time per step goes on the GPU machine (session 20)."""
import statistics, time, torch, triton
from polyrec.kernels import dense_optim
from polyrec.kernels.dense_optim import BLOCK, NUM_WARPS, adagrad_kernel
from polyrec.runtime import TrainConfig, Trainer
T = {}
def mark(name, t0):
    t1 = time.perf_counter(); T.setdefault(name, []).append(t1 - t0); return t1
def launch(self, params, group):
    t = time.perf_counter()
    steps = [self.state[p]["step"] for p in params]
    torch._foreach_add_(steps, 1); t = mark("foreach", t)
    lr, decay = group["lr"], group["lr_decay"]
    clrs = [lr] * len(params)
    starts, programs = [], 0
    for p in params:
        starts.append(programs); programs += triton.cdiv(p.numel(), BLOCK)
    dev = params[0].device
    lists = [[p.data_ptr() for p in params], [p.grad.data_ptr() for p in params],
             [self.state[p]["sum"].data_ptr() for p in params], [p.numel() for p in params], starts]
    t = mark("lists", t)
    host = torch.tensor(lists, dtype=torch.int64); t = mark("torch.tensor ints", t)
    ints = host.to(dev, non_blocking=True); t = mark("ints .to", t)
    clr = torch.tensor(clrs, dtype=torch.float32).to(dev, non_blocking=True); t = mark("clr tensor+to", t)
    adagrad_kernel[(programs,)](ints[0], ints[1], ints[2], ints[3], ints[4], clr, len(params), group["eps"],
                                BLOCK=BLOCK, T_PAD=triton.next_power_of_2(len(params)), num_warps=NUM_WARPS)
    mark("kernel launch", t)
dense_optim.FusedAdagrad._launch = launch
real_step = dense_optim.FusedAdagrad.step
def step(self, closure=None):
    t = time.perf_counter(); r = real_step(self, closure); mark("FusedAdagrad.step total (inner)", t); return r
dense_optim.FusedAdagrad.step = step
cfg = TrainConfig(preset="mlperf-dcnv2", batch_size=16384, row_cap=4_000_000, steps=10_000, synthetic_pool=4, cuda_graphs=False)
tr = Trainer(cfg, progress=False)
tr.benchmark(warmup=5, steps=5)
real_dense = tr._dense_optimizer_step
def dense_step():
    t = time.perf_counter(); tr.optimizer.step(); t = mark("optimizer.step (with torch wrapper)", t)
    tr.optimizer.zero_grad(set_to_none=True); mark("zero_grad", t)
tr._dense_optimizer_step = dense_step
T.clear()
m = tr.benchmark(warmup=0, steps=40)
print({k: round(v, 3) for k, v in m.items() if k.endswith("ms")})
for k, v in T.items():
    print(f"{k:40s} median {statistics.median(v)*1e6:8.1f} us  mean {statistics.mean(v)*1e6:8.1f} us  n={len(v)}")
