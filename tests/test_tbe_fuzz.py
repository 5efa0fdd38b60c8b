"""Randomized differential test of ``TableBatchedEmbedding`` through the Triton interpreter.

For each seed of SEEDS a small configuration is drawn (``_draw_case``): 2-6 tables of 1-300 rows (some
of one row), dims mixed from DIMS (or one shared dim), several features per table, batch 1-33, bags of
0-9 ids (all-empty features and batches, Zipf-like hot rows: heavy duplicates), per-sample weights,
sum / mean pooling, a sequence (pooling "none") table, every optimizer with and without weight decay,
fp32 / fp16 / bf16 rows and outputs, ``group_dims`` None / True / False, deterministic on / off, update
configs forced per dim group (scan and lane, tiles 2-16, chunks, merge chunks) or the selector's,
forward launches split with their own tiles, int32 ids, int64 sort keys, ids out of range (masked,
flagged, errors deferred), a row-strided gradient, ``lead_columns``, ``prepare_backward``, and the
sequence lookup's forward and backward between the pooled lookup's. It runs 2-3 training steps and
compares against a float64 reference built from torch alone (``nn.EmbeddingBag`` / ``F.embedding`` with
sparse gradients and ``torch.optim.SGD``, ``Adagrad``, ``SparseAdam``; row-wise Adagrad, which torch
lacks, is FBGEMM's rule written out in ``_Reference.step``): the forward output, every touched row, the
optimizer state, and rows no id touched (bit-identical). Deterministic cases repeat their last step on
a copy of the module (the same bits). Every buffer the module gets from ``torch.empty`` is poisoned
(NaN; integers: row id 1), so an element no kernel writes shows.

Gradients are dyadic (k / 16) and per-sample weights too (k / 8), so duplicates sum exactly in fp32 and the comparison
sees which terms were summed and the optimizer's arithmetic. Mean pooling's 1/len is not dyadic: there a cancelled sum
can be a few fp32 ulps off zero, which an accumulator starting at zero (or Adam's eps of 1e-8) would blow up to an
lr-sized step, so those cases start the accumulators at 0.1 and give Adam eps 1e-2: Adam's first step moves an element
by lr g / (|g| + eps), whose slope in g is up to lr / eps, and at eps 1e-3 a float64 gradient of exactly 0 plus weight
decay (seed 7975: 0.01 x -0.005) came out of fp32 a few 1e-8 off and its fp16 row two ulps from the reference's (lr
0.2: a slope of 181). fp16 / bf16 rows are rounded stochastically: each step the reference restarts from the module's
rounded rows and a row element may be one ulp of its precision away (either neighbour of the fp32 value); the fp32
state is followed across steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random

import pytest
import torch
import torch.nn.functional as F

from polyrec.kernels import tbe as tbe_module
from polyrec.kernels import tbe_select
from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_forward_plan import ForwardLaunch
from polyrec.kernels.tbe_optim import OPTIMIZERS

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="CPU kernel tests run the Triton interpreter (TRITON_INTERPRET=1)")

#: Seeds of the configurations drawn; each is one test case. ``TBE_FUZZ_SEEDS=a-b`` draws others (a hunt).
_SPAN = os.environ.get("TBE_FUZZ_SEEDS", "0-39").partition("-")
SEEDS = list(range(int(_SPAN[0]), int(_SPAN[2] or _SPAN[0]) + 1))
DIMS = (4, 8, 16, 24, 32, 64, 128)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Spacing of a precision's numbers in [1, 2) and its smallest subnormal (for its ulp at any magnitude).
EPSILON = {torch.float16: (2.0**-10, 2.0**-24), torch.bfloat16: (2.0**-7, 2.0**-133)}
MIN_NORMAL = {torch.float16: 2.0**-14, torch.bfloat16: 2.0**-126}
#: Most ``_cost`` of a case: bigger draws are shrunk (the whole file runs in about a minute on 2 cores);
#: ``TBE_FUZZ_COST`` sets another (a hunt with larger cases).
COST_LIMIT = float(os.environ.get("TBE_FUZZ_COST", "400"))


@dataclasses.dataclass(kw_only=True)
class Case:
    """One drawn configuration (printed on failure)."""

    tables: list[TableSpec]
    features: list[int]  # feature -> table
    batch_size: int
    steps: int
    opt: EmbeddingOptimizer
    weight_dtype: torch.dtype
    output_dtype: torch.dtype
    group_dims: bool | None
    deterministic: bool
    weighted: float  # probability that a step's batch carries per-sample weights
    hot: float  # probability that an id is one of the table's few hot rows
    max_len: int
    update_configs: dict[int, tbe_select.UpdateConfig] | None  # per BLOCK_D; None: the selector
    forward_split: bool  # the pooled forward in several launches of drawn configs
    int32_ids: bool
    strided_grad: bool
    lead_columns: int
    prepare: bool  # prepare_backward between forward and backward
    interleave: bool  # every lookup's forward before the backwards (in reverse order)
    int64_keys: bool  # sort keys as int64 (as for tables of 2^31 rows or more)
    bad_ids: bool  # some batches hold ids out of range (masked and flagged; errors deferred)


def _draw_case(seed: int) -> Case:
    rnd = random.Random(seed)
    n_tables = rnd.randint(2, 6)
    one_dim = rnd.random() < 0.25
    shared = rnd.choice(DIMS)
    dims = [shared if one_dim else rnd.choice(DIMS) for _ in range(n_tables)]
    rows = [rnd.choice([1, 1, 2, 3, rnd.randint(1, 40), rnd.randint(1, 300)]) for _ in range(n_tables)]
    pooling = [rnd.choice(["sum", "sum", "mean"]) for _ in range(n_tables)]
    if rnd.random() < 0.4:  # sequence tables, sharing one dim; at least one pooled table stays
        seq_dim = rnd.choice(DIMS)
        for t in rnd.sample(range(1, n_tables), rnd.randint(1, min(2, n_tables - 1))):
            pooling[t], dims[t] = "none", seq_dim
    tables = [TableSpec(name=f"t{t}", rows=r, dim=d, pooling=p) for t, (r, d, p) in enumerate(zip(rows, dims, pooling))]
    features = list(range(n_tables)) + [rnd.randrange(n_tables) for _ in range(rnd.randint(0, 2))]
    rnd.shuffle(features)
    has_mean = "mean" in pooling
    kind = OPTIMIZERS[seed % len(OPTIMIZERS)]
    init = 0.1 if has_mean or rnd.random() < 0.5 else 0.0
    opt = EmbeddingOptimizer(kind=kind, lr=rnd.choice([0.01, 0.05, 0.2]),
                             eps=1e-2 if kind == "adam" and has_mean else rnd.choice([1e-8, 1e-6]),
                             weight_decay=rnd.choice([0.0, 0.0, 0.01]),
                             initial_accumulator_value=init if "adagrad" in kind else 0.0,
                             beta1=rnd.choice([0.9, 0.5]), beta2=rnd.choice([0.999, 0.9]))
    update_configs = None
    if rnd.random() < 0.7:
        update_configs = {}
        for block in sorted({triton_block(d) for d in dims}):
            variant = rnd.choice(["scan", "lane"])
            update_configs[block] = tbe_select.UpdateConfig(
                tile=rnd.choice([2, 4, 8, 16]), num_warps=1, variant=variant,
                chunks=rnd.choice([1, 2, 4, 8]) if variant == "lane" else 1, merge_chunks=rnd.choice([1, 8]))
    case = Case(tables=tables, features=features, batch_size=rnd.choice([1, rnd.randint(1, 33), rnd.randint(1, 33), rnd.randint(16, 33)]),
                steps=rnd.choice([2, 3]), opt=opt, weight_dtype=DTYPES[(seed // 4) % 3],
                output_dtype=rnd.choice([torch.float32, torch.float32, torch.float16, torch.bfloat16]),
                group_dims=rnd.choice([None, True, False]), deterministic=rnd.random() < 0.5,
                weighted=rnd.choice([0.0, 0.5, 1.0]), hot=rnd.choice([0.0, 0.5, 0.9]), max_len=rnd.choice([3, 9]),
                update_configs=update_configs, forward_split=rnd.random() < 0.4, int32_ids=rnd.random() < 0.3,
                strided_grad=rnd.random() < 0.3, lead_columns=rnd.choice([0, 0, 3]), prepare=rnd.random() < 0.3,
                interleave=rnd.random() < 0.5, int64_keys=rnd.random() < 0.2,
                bad_ids=rnd.random() < 0.15)
    while _cost(case) > COST_LIMIT and _shrink(case, rnd):  # until it fits the time budget
        pass
    return case


def _shrink(case: Case, rnd: random.Random) -> bool:
    """Make ``case`` cheaper one way (a smaller batch, shorter bags, longer update tiles, one step fewer);
    False when no way is left."""
    tiles = [c.tile for c in case.update_configs.values()] if case.update_configs else [16]
    ways = [w for w, ok in (("batch", case.batch_size > 1), ("bags", case.max_len > 3), ("tiles", min(tiles) < 16),
                            ("steps", case.steps > 2)) if ok]
    if not ways:
        return False
    way = rnd.choice(ways)
    if way == "batch":
        case.batch_size = (case.batch_size + 1) // 2
    elif way == "bags":
        case.max_len = 3
    elif way == "tiles":
        case.update_configs = {b: dataclasses.replace(c, tile=max(c.tile, 2 * min(tiles)))
                               for b, c in case.update_configs.items()}
    else:
        case.steps -= 1
    return True


def _cost(case: Case) -> float:
    """Rough interpreter time of a case, in update tiles (a tile, or a forward program, takes 3-25 ms on one
    core): ids over the smallest tile, the merge, and the forward's programs, per lookup and step."""
    tile = min(c.tile for c in case.update_configs.values()) if case.update_configs else 8
    groups = len({triton_block(t.dim) for t in case.tables}) if case.group_dims else 1
    step = 0.0
    for sequence in (False, True):
        feats = [t for t in case.features if (case.tables[t].pooling == "none") == sequence]
        if feats:
            ids = case.batch_size * len(feats) * case.max_len * 0.35
            step += ids / tile + 2 * groups + len(feats) * math.ceil(case.batch_size / 4) * math.ceil(case.max_len / 4)
    return step * (case.steps + case.deterministic)


def triton_block(dim: int) -> int:
    return 1 << (dim - 1).bit_length()


def _draw_batch(case: Case, gen: torch.Generator, rnd: random.Random) -> JaggedBatch:
    """Bags of 0 to max_len ids (some features, or the whole batch, empty); ids of hot rows with
    probability ``case.hot`` (each table's rows 0 and its last: runs of many duplicates); where the case
    says so, now and then an id out of its table's range."""
    b = case.batch_size
    lengths = torch.randint(0, case.max_len + 1, (len(case.features) * b,), generator=gen)
    lengths[torch.rand(lengths.shape, generator=gen) < 0.25] = 0
    for f in range(len(case.features)):
        if rnd.random() < 0.1:
            lengths[f * b:(f + 1) * b] = 0
    if rnd.random() < 0.08:
        lengths.zero_()
    values = []
    for f, t in enumerate(case.features):
        n, rows = int(lengths[f * b:(f + 1) * b].sum()), case.tables[t].rows
        ids = torch.randint(0, rows, (n,), generator=gen)
        hot = torch.tensor([0, rows - 1])[torch.randint(0, 2, (n,), generator=gen)]
        ids = torch.where(torch.rand(n, generator=gen) < case.hot, hot, ids)
        if case.bad_ids and n and rnd.random() < 0.3:
            ids[rnd.randrange(n)] = rnd.choice([-1, rows, rows + 7])
        values.append(ids)
    values = torch.cat(values)
    weights = None
    if rnd.random() < case.weighted:
        weights = torch.randint(2, 17, values.shape, generator=gen).float() / 8  # dyadic, 0.25 .. 2
    batch = JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=b, num_features=len(case.features),
                                     weights=weights)
    if case.int32_ids:
        batch = JaggedBatch(values=batch.values.int(), offsets=batch.offsets.int(), batch_size=b,
                            num_features=batch.num_features, weights=weights)
    return batch


def _dyadic(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-32, 33, shape, generator=gen).double() / 16


@contextlib.contextmanager
def _poisoned_empty():
    """``torch.empty`` that fills what it returns: NaN for floats, 1 (a valid row id) for integers."""
    real = torch.empty

    def empty(*args, **kwargs):
        out = real(*args, **kwargs)
        with torch.no_grad():
            out.fill_(float("nan") if out.is_floating_point() else 1)
        return out

    torch.empty = empty
    try:
        yield
    finally:
        torch.empty = real


class _Reference:
    """float64 tables as torch parameters, trained by torch's sparse optimizers (row-wise Adagrad: by
    hand), with L2 weight decay added to the coalesced gradient of the present rows."""

    def __init__(self, case: Case, weights: list[torch.Tensor]):
        self.case, self.opt = case, case.opt
        self.params = [torch.nn.Parameter(w.detach().double().clone()) for w in weights]
        opt = case.opt
        if opt.kind == "sgd":
            self.torch_opt = torch.optim.SGD(self.params, lr=opt.lr)
        elif opt.kind == "adagrad":
            self.torch_opt = torch.optim.Adagrad(self.params, lr=opt.lr, eps=opt.eps,
                                                 initial_accumulator_value=opt.initial_accumulator_value)
        elif opt.kind == "adam":
            self.torch_opt = torch.optim.SparseAdam(self.params, lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
        else:
            self.torch_opt = None
            self.rowwise = [torch.full((t.rows,), opt.initial_accumulator_value, dtype=torch.float64)
                            for t in case.tables]

    def pooled(self, batch: JaggedBatch) -> torch.Tensor:
        """[B, output_dim] float64: nn.EmbeddingBag (sum, per-sample weights) per pooled feature, divided by
        the bag length for mean pooling."""
        cols, b = [], batch.batch_size
        for f, t in enumerate(self.case.features):
            spec = self.case.tables[t]
            if spec.pooling == "none":
                continue
            off = batch.offsets[f * b:(f + 1) * b + 1].long()
            ids = batch.values[int(off[0]):int(off[-1])].long()
            lengths = off.diff()
            valid = (ids >= 0) & (ids < spec.rows)  # out-of-range ids add nothing (they count in a mean's length)
            kept = torch.bincount(torch.repeat_interleave(torch.arange(b), lengths)[valid], minlength=b)
            psw = None if batch.weights is None else batch.weights[int(off[0]):int(off[-1])][valid].double()
            out = F.embedding_bag(ids[valid], self.params[t], kept.cumsum(0) - kept, mode="sum", sparse=True,
                                  per_sample_weights=psw)
            if spec.pooling == "mean":
                out = out / lengths.clamp_min(1)[:, None].double()
            cols.append(out)
        return torch.cat(cols, 1)

    def sequence(self, batch: JaggedBatch) -> torch.Tensor:
        """[n, D] float64: the rows of the sequence features' ids, feature-major (zero for an id out of range)."""
        rows, b = [], batch.batch_size
        for f, t in enumerate(self.case.features):
            if self.case.tables[t].pooling == "none":
                ids = batch.values[int(batch.offsets[f * b]):int(batch.offsets[(f + 1) * b])].long()
                valid = (ids >= 0) & (ids < self.case.tables[t].rows)
                found = F.embedding(ids[valid], self.params[t], sparse=True)
                rows.append(torch.zeros(ids.numel(), found.shape[1], dtype=torch.float64).index_put(
                    (valid.nonzero()[:, 0],), found))
        return torch.cat(rows)

    def step(self, out: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
        """One optimizer step of the loss sum(out * grad); returns each table's present rows (sorted ids)."""
        for p in self.params:
            p.grad = None
        (out * grad).sum().backward()
        present = []
        for t, p in enumerate(self.params):
            if p.grad is None:  # every table takes the step (Adam's step count is the module's)
                g = torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(0, p.shape[1],
                                            dtype=torch.float64), p.shape)
            else:
                g = p.grad.coalesce()
            idx, vals = g.indices()[0], g.values()
            vals = vals + self.opt.weight_decay * p.data[idx]
            p.grad = torch.sparse_coo_tensor(idx[None], vals, p.shape).coalesce()
            present.append(idx)
            if self.torch_opt is None:  # row-wise Adagrad (FBGEMM): s += mean_d(g^2); w -= lr g / (sqrt(s) + eps)
                self.rowwise[t][idx] += (vals * vals).mean(1)
                p.data[idx] -= self.opt.lr * vals / (self.rowwise[t][idx].sqrt() + self.opt.eps)[:, None]
        if self.torch_opt is not None:
            self.torch_opt.step()
        return present

    def states(self) -> list[list[torch.Tensor]]:
        """Each table's optimizer state, in the module's order (``_module_states``)."""
        if self.opt.kind == "sgd":
            return [[] for _ in self.params]
        if self.opt.kind == "rowwise_adagrad":
            return [[s] for s in self.rowwise]
        keys = ["sum"] if self.opt.kind == "adagrad" else ["exp_avg", "exp_avg_sq"]
        return [[self.torch_opt.state[p][k] if k in self.torch_opt.state[p] else torch.zeros_like(p) for k in keys]
                for p in self.params]

    def restart_rows(self, weights: list[torch.Tensor]) -> None:
        """Continue from the module's rows (half precision: after their stochastic rounding)."""
        for p, w in zip(self.params, weights):
            p.data.copy_(w.double())


def _module_states(module: TableBatchedEmbedding) -> list[list[torch.Tensor]]:
    kind = module.optimizer.kind
    if kind == "sgd":
        return [[] for _ in module.tables]
    if kind == "rowwise_adagrad":
        return [[s] for s in module.table_state()]
    if kind == "adagrad":
        return [[s] for s in module._split(module.state1)]
    return [[m, v] for m, v in zip(module._split(module.state1), module._split(module.state2))]


def _ulp(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype``'s numbers at |x| (float64): the gap between the two neighbours of a value."""
    eps, tiny = EPSILON[dtype]
    mag = x.abs().clamp_min(MIN_NORMAL[dtype])
    return torch.maximum(torch.exp2(torch.floor(torch.log2(mag))) * eps, torch.full_like(x, tiny))


def _check_rows(case: Case, got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if case.weight_dtype == torch.float32:
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")
        return
    # stochastic rounding: one of the two neighbours of the fp32 result (which is within fp32 error of want)
    bound = _ulp(torch.maximum(got.double().abs(), want.abs()), case.weight_dtype) + 1e-6 + 1e-5 * want.abs()
    err = (got.double() - want).abs()
    assert bool((err <= bound).all()), f"{what}: max error {float(err.max()):.3g}, {int((err > bound).sum())} " \
                                       f"elements beyond one ulp"


def _check_forward(out: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert not torch.isnan(out).any(), f"{what}: unwritten (NaN-poisoned) output elements"
    rtol = {torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[out.dtype]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=1e-6, msg=lambda m: f"{what}: {m}")


def _gradients(case: Case, module: TableBatchedEmbedding, batches: dict, gen: torch.Generator) -> dict:
    """A dyadic gradient per lookup, of its output's shape and dtype; row-strided (columns of a wider
    tensor) where the case says so."""
    out = {}
    for lookup, batch in batches.items():
        if lookup == "pooled":
            shape = (batch.batch_size, module.output_dim)
        else:
            b = batch.batch_size
            n = sum(int(batch.offsets[(f + 1) * b] - batch.offsets[f * b]) for f in module.sequence_features)
            shape = (n, module.sequence_dim)
        pad = 5 if case.strided_grad else 0
        out[lookup] = _dyadic((shape[0], shape[1] + pad), gen).to(case.output_dtype)[:, pad:]
    return out


def _launch_plans(module: TableBatchedEmbedding, rnd: random.Random):
    """A plan_forward replacement: the pooled features in 1-3 launches, each with a drawn tile."""
    def plan(spec, **kw):
        order = list(range(len(module.pooled_features)))
        rnd.shuffle(order)
        cut = sorted(rnd.sample(range(1, len(order)), min(rnd.randint(0, 2), len(order) - 1))) if len(order) > 1 else []
        parts = [order[a:b] for a, b in zip([0, *cut], [*cut, len(order)])]
        return [ForwardLaunch(features=tuple(p), config=tbe_select.ForwardConfig(
            bags=rnd.choice([2, 4, 16]), hots=rnd.choice([1, 2, 4, 8]), num_warps=1)) for p in parts]
    return plan


def _has_bad_id(case: Case, batch: JaggedBatch, sequence: bool) -> bool:
    """Whether an id of the pooled (or the sequence) features of ``batch`` is out of its table's range."""
    b = batch.batch_size
    for f, t in enumerate(case.features):
        if (case.tables[t].pooling == "none") == sequence:
            ids = batch.values[int(batch.offsets[f * b]):int(batch.offsets[(f + 1) * b])]
            if bool(((ids < 0) | (ids >= case.tables[t].rows)).any()):
                return True
    return False


def _run_step(case: Case, m: TableBatchedEmbedding, batches: dict, grads: dict, on_forward=None, on_backward=None):
    """The step's lookups (pooled, then sequence) on ``m``: each forward then its backward, or (``interleave``)
    every forward first and the backwards in reverse order. Each backward is an optimizer step. The
    callbacks see each lookup's output after its forward, and each backward before and after it."""
    outs = {}
    m.defer_errors = case.bad_ids  # bad ids are kept for check_errors (below) instead of raising in the lookup

    def forward(lookup):
        with _poisoned_empty():
            if lookup == "pooled":
                outs[lookup] = m(batches[lookup], lead_columns=case.lead_columns)
                if case.prepare:
                    m.prepare_backward(batches[lookup])
            else:
                outs[lookup] = m.lookup_sequence(batches[lookup])
        if _has_bad_id(case, batches[lookup], lookup == "sequence"):
            with pytest.raises(JaggedBatchError, match="masked, not applied"):
                m.check_errors()
        m.check_errors()
        if on_forward:
            on_forward(lookup, outs[lookup])

    def backward(lookup):
        if on_backward:
            on_backward(lookup, False)
        with _poisoned_empty():
            outs[lookup].backward(grads[lookup])
        if on_backward:
            on_backward(lookup, True)

    lookups = list(batches)
    if case.interleave:
        for lookup in lookups:
            forward(lookup)
        for lookup in reversed(lookups):
            backward(lookup)
    else:
        for lookup in lookups:
            forward(lookup)
            backward(lookup)


def _train_and_compare(seed: int, monkeypatch) -> None:
    case = _draw_case(seed)
    rnd = random.Random(seed * 7 + 1)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the module's stochastic-rounding seeds when not deterministic
    if case.update_configs is not None:
        configs = case.update_configs
        monkeypatch.setattr(tbe_select, "select_update", lambda spec, **kw: configs[kw["block_d"]])
    if case.int64_keys:
        monkeypatch.setattr(tbe_select, "INT32_KEY_LIMIT", 0)
    kw = dict(optimizer=case.opt, weight_dtype=case.weight_dtype, feature_to_table=case.features, seed=seed,
              deterministic=case.deterministic, output_dtype=case.output_dtype, group_dims=case.group_dims)
    module = TableBatchedEmbedding(case.tables, **kw)
    if case.forward_split:
        monkeypatch.setattr(tbe_module, "plan_forward", _launch_plans(module, rnd))
    ref = _Reference(case, module.table_weights())
    half = case.weight_dtype != torch.float32
    lookups = ["pooled"] + (["sequence"] if module.sequence_features else [])
    steps_taken = 0
    for step in range(1, case.steps + 1):
        batches = {lookup: _draw_batch(case, gen, rnd) for lookup in lookups}
        grads = _gradients(case, module, batches, gen)
        wants, before = {}, {}
        twin = None
        if case.deterministic and step == case.steps:  # the same step again must give the same bits
            twin = TableBatchedEmbedding(case.tables, **kw)
            twin.load_state_dict(module.state_dict())

        def on_forward(lookup, out):
            what = f"step {step} {lookup} forward"
            if half:  # the reference restarts from the module's rounded rows
                ref.restart_rows(module.table_weights())
            wants[lookup] = ref.pooled(batches[lookup]) if lookup == "pooled" else ref.sequence(batches[lookup])
            _check_forward(out.detach(), wants[lookup].detach(), what)
            if lookup == "pooled" and case.lead_columns:
                assert torch.isnan(out._base[:, :case.lead_columns]).all(), f"{what}: lead columns written"

        def on_backward(lookup, done):
            nonlocal steps_taken
            if not done:
                if half:
                    ref.restart_rows(module.table_weights())
                before["w"] = [w.clone() for w in module.table_weights()]
                before["s"] = [[s.clone() for s in ss] for ss in _module_states(module)]
                return
            steps_taken += 1
            assert module.step == steps_taken
            present = ref.step(wants[lookup], grads[lookup].double())
            _check_tables(case, module, ref, present, before, f"step {step} {lookup}")

        _run_step(case, module, batches, grads, on_forward, on_backward)
        if twin is not None:
            _run_step(case, twin, batches, grads)
            assert torch.equal(twin.weights.view(torch.uint8), module.weights.view(torch.uint8)), \
                f"step {step}: deterministic mode gave other bits on a repeat"
            assert torch.equal(twin.state1, module.state1) and torch.equal(twin.state2, module.state2)


def _check_tables(case: Case, module: TableBatchedEmbedding, ref: _Reference, present: list[torch.Tensor],
                  before: dict, what: str) -> None:
    """After one backward: the rows present in the batch as the reference, the others (and their state)
    bit-identical to before."""
    states = _module_states(module)
    for t, (w, ws, ss, rows) in enumerate(zip(module.table_weights(), ref.params, ref.states(), present)):
        label = f"{what} table {t} ({case.tables[t]})"
        untouched = torch.ones(w.shape[0], dtype=torch.bool)
        untouched[rows] = False
        assert torch.equal(w[untouched], before["w"][t][untouched]), f"{label}: a row no id touched moved"
        _check_rows(case, w[rows], ws.data[rows], label + " rows")
        for k, (got, want, prev) in enumerate(zip(states[t], ss, before["s"][t])):
            assert torch.equal(got[untouched], prev[untouched]), f"{label}: state {k} of an untouched row moved"
            torch.testing.assert_close(got[rows].double(), want[rows], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{label} state {k}: {m}")


@pytest.mark.parametrize("seed", SEEDS)
def test_random_configuration_trains_as_the_float64_reference(seed, monkeypatch):
    _train_and_compare(seed, monkeypatch)


#: (dims, ids per feature = table, update tile) of ``test_grouped_lane_tile_at_other_groups_keys``
GROUP_EDGE_CASES = {
    # groups (4: t2), (8: t0), (16: t1); t0's one key lies between the other groups' keys inside one tile
    "between": ([8, 16, 4], [[1], [2, 2], [0]], 16),
    # groups (4: t1), (8: t0, t2); the first tile of sorted keys (t1 1, t0 2, t2 0, t2 0) ends in t2
    "first-outside": ([8, 4, 8], [[2], [1], [0, 0, 1, 2]], 4),
}


def check_group_edge_layout(layout: str, variant: str, device: str = "cpu") -> None:
    """One ``GROUP_EDGE_CASES`` layout, updated with one launch per dim group at a forced tile: SGD, lr 1,
    gradient 1, so each row present moves by -1 per occurrence and no other row moves (also run on the
    GPU by tests/gpu/test_tbe_gpu.py)."""
    dims, ids, tile = GROUP_EDGE_CASES[layout]
    tables = [TableSpec(name=f"t{t}", rows=3, dim=d) for t, d in enumerate(dims)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="sgd", lr=1.0), group_dims=True,
                                   update_config=tbe_select.UpdateConfig(tile=tile, num_warps=1, variant=variant),
                                   device=device)
    assert len(module.key_plan(4).blocks) == len(set(dims))
    batch = JaggedBatch.from_lengths(values=torch.tensor([i for bag in ids for i in bag], device=device),
                                     lengths=torch.tensor([len(bag) for bag in ids], device=device), batch_size=1,
                                     num_features=len(dims))
    before = [w.clone() for w in module.table_weights()]
    out = module(batch)
    out.backward(torch.ones_like(out))
    for w, start, bag in zip(module.table_weights(), before, ids):
        counts = torch.bincount(torch.tensor(bag), minlength=3).float()[:, None].to(device)
        torch.testing.assert_close(w, start - counts, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ["lane", "scan"])
@pytest.mark.parametrize("layout", sorted(GROUP_EDGE_CASES))
def test_grouped_lane_tile_at_other_groups_keys(layout, variant):
    """Regression (found by this fuzz, seed 12): with one update launch per dim group, a lane-update tile
    whose first (and last) sorted key is another group's took its table bounds from those keys' invalid
    rows, i.e. the last table, so when both bounds fell there every row of the tile was read as the last
    table's: a row of another table was updated at a wrong address (another table's memory) and its own
    was left as it was."""
    check_group_edge_layout(layout, variant)


def test_update_launches_of_different_spans_read_no_key_past_the_padding(monkeypatch):
    """Groups whose configs take 24 and 16 positions per program (chunks of 3 tiles beside one of 16): the
    sorted keys were padded to a multiple of the widest span (24 + 1 = 25 at 17 ids), and the 16-position
    launch's second program read keys 16..31. Now every launch's programs are covered (33)."""
    configs = {8: tbe_select.UpdateConfig(tile=8, num_warps=1, chunks=3),
               16: tbe_select.UpdateConfig(tile=16, num_warps=1)}
    monkeypatch.setattr(tbe_select, "select_update", lambda spec, **kw: configs[kw["block_d"]])
    tables = [TableSpec(name="t0", rows=5, dim=8), TableSpec(name="t1", rows=5, dim=16)]
    module = TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="sgd", lr=1.0), group_dims=True)
    ids = [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 0, 1, 2, 3]]  # 17 ids
    batch = JaggedBatch.from_lengths(values=torch.tensor([i for bag in ids for i in bag]),
                                     lengths=torch.tensor([len(bag) for bag in ids]), batch_size=1, num_features=2)
    assert len(module.new_sort_keys(batch.values, batch.offsets, None).keys) >= 2 * 16 + 1
    before = [w.clone() for w in module.table_weights()]
    out = module(batch)
    out.backward(torch.ones_like(out))
    for w, start, bag in zip(module.table_weights(), before, ids):
        counts = torch.bincount(torch.tensor(bag), minlength=5).float()[:, None]
        torch.testing.assert_close(w, start - counts, rtol=0, atol=1e-6)
