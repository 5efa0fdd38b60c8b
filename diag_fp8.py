import torch
from polyrec.kernels import fp8
for dt in (torch.float32, torch.bfloat16):
    for shape in ((128, 512), (512, 256), (1024, 256)):
        s = fp8.Fp8Scaling(['forward']).cuda(); s.begin(True)
        w = (torch.randn(*shape, device='cuda') * 0.05).to(dt)
        q, qt = fp8.cast_fp8(w, s, 0, transposed=True)
        ref = (w.float() * s.scales[0]).clamp(-448, 448).to(torch.float8_e4m3fn).float()
        print(dt, shape, 'q nan', q.float().isnan().sum().item(), 'qt nan', qt.float().isnan().sum().item(),
              'q ok', torch.equal(q.float(), ref), 'qt ok', torch.equal(qt.float(), ref.t()))
