"""The dense parameters' Adagrad step in one Triton launch (``FusedAdagrad``).

``torch.optim.Adagrad`` on CUDA runs its foreach path: four multi-tensor kernels per step (``sum += g²``,
``sqrt``, ``+ eps``, ``p += -lr g / std``), 11 passes over a parameter-sized tensor; its ``fused=True``
is CPU-only in torch 2.11 (refused on CUDA, seen on the H200 2026-12-01). ``adagrad_kernel`` reads the
parameter, its gradient and its sum once and writes the parameter and the sum: 5 passes. Every program
takes BLOCK elements of one tensor; the tensors are found through tables of their addresses, sizes
and first programs, so one launch covers all of them (MLPerf DLRM-DCNv2: 25 tensors, 16M values).
Where a parameter keeps a compute-dtype copy (``polyrec.kernels.master_copies``: the forward's bf16
copy of the master), the same pass writes the updated values into it too, so the next forward casts
nothing.

The state (per parameter ``sum`` and ``step``) and the state dict are ``torch.optim.Adagrad``'s, so a
checkpoint of either optimizer loads into the other. Weight decay and ``maximize`` are not supported
(the trainer uses neither).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyrec.hardware.compile import CompileJob
from polyrec.hardware.types import DeviceSpec
from polyrec.kernels.grid import ceil_div
from polyrec.kernels.interpreter import interpreting
from polyrec.kernels.master_copies import drop, kept_copy, mark_current

#: Values per program: 4 warps of 32 lanes, 8 fp32 values each (two 16-byte accesses per tensor).
BLOCK = 1024
NUM_WARPS = 4
#: Address tables kept for reuse, least recently used dropped first. The trainer's dense gradients are
#: new tensors each step, but their addresses repeat: 1 distinct set over 30 steps with the dense half
#: CUDA-graphed; eager MLPerf DLRM-DCNv2 at batch 16384 took 16 sets in 30 steps on one H200, so 8 tables,
#: emptied when full, were rebuilt on 21 of 35 steps (benchmarks/results/host_side_probes_2026-12-01_s21,
#: optstep_30c0171.json; another H200 took 1 set in 60 steps, host_side_probes_2026-12-01_s22). A hit
#: skips building and copying the tables: 41 + 51 + 31 us of host time (the int table, its copy, the step
#: sizes) timed inside MLPerf training steps on the GPU machine.
TABLES_KEPT = 64


@triton.jit
def adagrad_kernel(param_table, grad_table, sum_table, copy_table, size_table, start_table, clr_table, num_tensors,
                   eps, BLOCK: tl.constexpr, T_PAD: tl.constexpr, COPY_FP16: tl.constexpr):
    """BLOCK values of one tensor: ``sum += g * g``, ``p -= clr * g / (sqrt(sum) + eps)`` (IEEE sqrt
    and division, as torch's), and the new ``p`` rounded to nearest into its copy where it has one.
    The tables hold per tensor its parameter, gradient, sum and copy addresses (int64; copy 0: none; the
    copies bf16, or fp16 with ``COPY_FP16``), its size, its first program and its step size ``clr`` (fp32)."""
    pid = tl.program_id(0)
    tb = tl.arange(0, T_PAD)
    starts = tl.load(start_table + tb, mask=tb < num_tensors, other=0x7FFFFFFF)
    t = tl.sum((starts <= pid).to(tl.int32), axis=0) - 1  # the tensor of this program
    offs = (pid - tl.load(start_table + t)).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < tl.load(size_table + t)
    p_ptr = tl.load(param_table + t).to(tl.pointer_type(tl.float32))
    g_ptr = tl.load(grad_table + t).to(tl.pointer_type(tl.float32))
    s_ptr = tl.load(sum_table + t).to(tl.pointer_type(tl.float32))
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    s = tl.load(s_ptr + offs, mask=mask, other=0.0) + g * g
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    p = p - tl.load(clr_table + t) * tl.div_rn(g, tl.sqrt_rn(s) + eps)
    tl.store(s_ptr + offs, s, mask=mask)
    tl.store(p_ptr + offs, p, mask=mask)
    copy_addr = tl.load(copy_table + t)
    if copy_addr != 0:
        copy_dtype = tl.float16 if COPY_FP16 else tl.bfloat16
        tl.store(copy_addr.to(tl.pointer_type(copy_dtype)) + offs, p.to(copy_dtype), mask=mask)


def _check(p: torch.Tensor) -> None:
    g = p.grad
    if not (p.is_cuda or interpreting()):
        raise ValueError(f"FusedAdagrad: parameters must be on a CUDA / ROCm GPU (or run under TRITON_INTERPRET), "
                         f"got one {tuple(p.shape)} on {p.device}; use torch.optim.Adagrad there")
    if p.dtype != torch.float32 or not p.is_contiguous():
        raise ValueError(f"FusedAdagrad: parameters must be contiguous fp32, got {p.dtype} {tuple(p.shape)}")
    if g.is_sparse or g.dtype != torch.float32 or not g.is_contiguous() or g.device != p.device:
        raise ValueError(f"FusedAdagrad: gradients must be dense contiguous fp32 on the parameter's device, got "
                         f"{g.layout} {g.dtype} on {g.device} for a parameter {tuple(p.shape)}")


class FusedAdagrad(torch.optim.Optimizer):
    """``torch.optim.Adagrad`` (no weight decay) as one ``adagrad_kernel`` launch per step and group.

    Same hyperparameters and defaults (lr 1e-2, lr_decay 0, eps 1e-10, initial_accumulator_value 0),
    the same state (``sum`` like the parameter, ``step`` a CPU float tensor: here a view into one
    tensor of every parameter's count) and state dict."""

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, eps: float = 1e-10,
                 initial_accumulator_value: float = 0.0) -> None:
        if not min(lr, lr_decay, eps, initial_accumulator_value) >= 0:  # NaN fails too, as in torch's Adagrad
            raise ValueError(f"FusedAdagrad: lr, lr_decay, eps and initial_accumulator_value must be >= 0, got "
                             f"{lr}, {lr_decay}, {eps}, {initial_accumulator_value}")
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": 0.0,
                    "initial_accumulator_value": initial_accumulator_value, "foreach": None, "maximize": False,
                    "differentiable": False, "fused": None}
        #: Device tables of recent launches by their addresses, sizes and step sizes (``_launch``).
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor, int]] = {}
        super().__init__(params, defaults)  # each group through ``add_param_group``
        self.register_load_state_dict_post_hook(lambda optimizer: optimizer._link_steps())

    def add_param_group(self, param_group: dict) -> None:
        """torch's, and the new parameters' state as ``torch.optim.Adagrad`` makes it (its sum starts at the
        constructor's ``initial_accumulator_value``, whatever the group says), counts linked."""
        super().add_param_group(param_group)
        for p in self.param_groups[-1]["params"]:
            self.state[p]["step"] = torch.tensor(0.0)
            self.state[p]["sum"] = torch.full_like(p, self.defaults["initial_accumulator_value"])
        self._link_steps()

    def _link_steps(self) -> None:
        """Make every parameter's ``step`` (torch's per-parameter CPU tensor) a view into one tensor of
        all the counts, group by group, so that a step of a group whose parameters all have gradients is
        one add (a foreach add over 25 tensors took 166 us of the GPU machine's host per step). After a
        state dict is loaded the counts are linked again (the hook in ``__init__``)."""
        params = [p for group in self.param_groups for p in group["params"]]
        self._counts = torch.tensor([float(self.state[p]["step"]) for p in params])  # [all parameters]
        for i, p in enumerate(params):
            self.state[p]["step"] = self._counts[i]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else torch.enable_grad()(closure)()
        for group in self.param_groups:
            if group["weight_decay"] or group["maximize"]:
                raise ValueError("FusedAdagrad: weight_decay and maximize are not supported")
            live = [p for p in group["params"] if p.grad is not None]
            for p in live:
                _check(p)
            if live:
                self._count_step(live)
                self._launch(live, group)
        return loss

    def _count_step(self, live: list[torch.Tensor]) -> None:
        """Add one to the step count of each parameter in ``live`` (a group's with gradients)."""
        steps = [self.state[p]["step"] for p in live]
        first = steps[0].storage_offset()
        if all(s._base is self._counts and s.storage_offset() == first + i for i, s in enumerate(steps)):
            self._counts[first:first + len(steps)] += 1  # exactly these counts: adjacent views (_link_steps)
        else:  # a parameter without a gradient between them, or a count replaced by hand
            torch._foreach_add_(steps, 1)

    def _launch(self, params: list[torch.Tensor], group: dict) -> None:
        """One ``adagrad_kernel`` over ``params`` (all with gradients), each at its own step, their kept
        compute-dtype copies written in the same pass."""
        lr, decay = group["lr"], group["lr_decay"]
        clrs = (tuple(lr / (1 + (self.state[p]["step"].item() - 1) * decay) for p in params) if decay
                else (lr,) * len(params))
        copies, copy_fp16 = _copies(params)
        key = (tuple(p.data_ptr() for p in params), tuple(p.grad.data_ptr() for p in params),
               tuple(self.state[p]["sum"].data_ptr() for p in params), copies, tuple(p.numel() for p in params),
               clrs)
        tables = self._tables.pop(key, None)
        if tables is None:
            if len(self._tables) >= TABLES_KEPT:
                del self._tables[next(iter(self._tables))]  # the least recently used
            tables = _device_tables(key, params[0].device)
        self._tables[key] = tables  # now the most recently used
        ints, clr, programs = tables
        adagrad_kernel[(programs,)](ints[0], ints[1], ints[2], ints[3], ints[4], ints[5], clr, len(params),
                                    group["eps"], BLOCK=BLOCK, T_PAD=triton.next_power_of_2(len(params)),
                                    COPY_FP16=copy_fp16, num_warps=NUM_WARPS)
        for p, copy in zip(params, copies):
            if copy:
                mark_current(p)


def _copies(params: list[torch.Tensor]) -> tuple[tuple[int, ...], bool]:
    """The address of each parameter's kept compute-dtype copy (0: none) and whether the copies are fp16
    (else bf16). One launch writes one dtype: a copy of the dtype fewer copies have, or of another
    dtype, is dropped (the next forward casts afresh)."""
    held = [kept_copy(p) for p in params]
    dtypes = [c.dtype for c in held if c is not None]
    copy_fp16 = dtypes.count(torch.float16) > dtypes.count(torch.bfloat16)
    want = torch.float16 if copy_fp16 else torch.bfloat16
    for p, c in zip(params, held):
        if c is not None and c.dtype != want:
            drop(p)
    return tuple(c.data_ptr() if c is not None and c.dtype == want else 0 for c in held), copy_fp16


def _device_tables(key: tuple, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(the [6, T] int64 table of parameter, gradient, sum and copy addresses, sizes and first programs;
    the [T] fp32 step sizes; the programs in all) of ``FusedAdagrad._launch``'s key, on ``dev``."""
    params, grads, sums, copies, sizes, clrs = key
    starts, programs = [], 0
    for size in sizes:
        starts.append(programs)
        programs += ceil_div(size, BLOCK)
    ints = torch.tensor([params, grads, sums, copies, sizes, starts], dtype=torch.int64)
    clr = torch.tensor(clrs, dtype=torch.float32)
    return ints.to(dev, non_blocking=dev.type == "cuda"), clr.to(dev, non_blocking=dev.type == "cuda"), programs


def compile_jobs(spec: DeviceSpec) -> list[CompileJob]:
    """The configurations ``FusedAdagrad`` launches (up to 64 tensors, MLPerf DLRM-DCNv2 has 25; bf16 or
    fp16 copies)."""
    signature = {"param_table": "*i64", "grad_table": "*i64", "sum_table": "*i64", "copy_table": "*i64",
                 "size_table": "*i64", "start_table": "*i64", "clr_table": "*fp32", "num_tensors": "i32",
                 "eps": "fp32", "BLOCK": "constexpr", "T_PAD": "constexpr", "COPY_FP16": "constexpr"}
    return [CompileJob(label=f"adagrad BLOCK{BLOCK} T64 {'fp16' if fp16 else 'bf16'} copies", kernel=adagrad_kernel,
                       signature=signature, constexprs={"BLOCK": BLOCK, "T_PAD": 64, "COPY_FP16": fp16},
                       num_warps=NUM_WARPS, num_stages=1,
                       divisible_by_16=("param_table", "grad_table", "sum_table", "copy_table", "size_table",
                                        "start_table", "clr_table"))
            for fp16 in (False, True)]
