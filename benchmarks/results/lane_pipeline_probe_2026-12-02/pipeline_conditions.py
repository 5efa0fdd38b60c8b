import sys, triton, triton.language as tl
sys.path.insert(0, "benchmarks")
import sass_count as sc
from polyrec.hardware.compile import CompileJob

@triton.jit
def gather_loop(src_ptr, idx_ptr, out_ptr, CHUNKS: tl.constexpr, TILE: tl.constexpr, D: tl.constexpr, STAGES: tl.constexpr,
                STORE: tl.constexpr, BARRIER: tl.constexpr, MASK: tl.constexpr, SCAN: tl.constexpr):
    prog = tl.program_id(0)
    i = tl.arange(0, TILE)
    d = tl.arange(0, D)
    acc = tl.zeros([D], dtype=tl.float32)
    for c in tl.range(CHUNKS, num_stages=STAGES):
        pos = prog * CHUNKS * TILE + c * TILE + i
        key = tl.load(idx_ptr + pos)
        nxt = tl.load(idx_ptr + pos + 1)
        if MASK:
            m = (key != nxt)[:, None] & (d[None, :] < D)
        else:
            m = (key >= -1)[:, None] & (d[None, :] < D)
        rows = tl.load(src_ptr + key.to(tl.int64)[:, None] * D + d[None, :], mask=m, other=0.0)
        if BARRIER:
            tl.debug_barrier()
        if SCAN:
            rows = tl.cumsum(rows, 0)
        if STORE:
            tl.store(src_ptr + key.to(tl.int64)[:, None] * D + d[None, :], rows * 0.5, mask=m)
        acc += tl.sum(rows, axis=0)
    tl.store(out_ptr + prog * D + d, acc)

base = {"CHUNKS": 8, "TILE": 8, "D": 128, "STAGES": 3, "STORE": 0, "BARRIER": 0, "MASK": 0, "SCAN": 0}
for name, over in (("plain", {}), ("mask", {"MASK": 1}), ("store", {"STORE": 1}), ("barrier", {"BARRIER": 1}), ("scan", {"SCAN": 1}),
                   ("mask+store", {"MASK": 1, "STORE": 1})):
    cx = {**base, **over}
    job = CompileJob(label=f"gather {name}", kernel=gather_loop,
                     signature={**{"src_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*fp32"}, **{k: "constexpr" for k in cx}},
                     constexprs=cx, num_warps=1)
    r = sc.analyse(job, __import__("pathlib").Path("/tmp/pipe2"))
    sass = open(f"/tmp/pipe2/gather_{name.replace('+', '_')}.sass").read()
    print(f"{name:12} regs {r['registers']:4} total {r['total']:5} LDGSTS {sass.count('LDGSTS')}")
