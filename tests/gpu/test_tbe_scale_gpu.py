"""TableBatchedEmbedding at training scale on the GPU vs the float64 reference.

The CPU tests force each update config on small batches through the interpreter; these run the configs
the selector picks for large batches (8-tile lane programs, several merge levels, tables of one dim and
of mixed dims, half-precision rows with their stochastic rounding, a bf16 output gradient) on batches of
up to 10M ids with Zipf-hot rows (one row holds ~5% of a table's ids: runs crossing thousands of tiles),
empty bags, mean pooling, per-sample weights, odd batch sizes, and tables that several features read
(int32 ids and offsets). Each step starts the float64
reference from the module's own weights and state and compares the pooled output, then every table and
its state after the update.

Every gradient term is a dyadic rational (output gradients k/16, per-sample weights k/4, mean bags of
power-of-two lengths) and no sum of them reaches 2**24 units, so the fp32 sums of duplicates are exact in
any order: a row's summed gradient equals the reference's, and what is compared is which terms the
kernels sum and the optimizer's arithmetic. (With gradients like randn, a sum that cancels carries an
error of ~1e-7 of its terms' magnitudes, more than 1e-5 of itself, and Adam's and Adagrad's first step
turns that into a different sign.) Last, the deterministic mode at that scale: bitwise repeatable.
Run on the device machine (``-s`` prints each step's largest error as a fraction of its allowance):
PYTHONPATH=. python3 -m pytest -q -s tests/gpu/test_tbe_scale_gpu.py
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from benchmark_util import load_benchmark
from polyrec.kernels.jagged import JaggedBatch
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_reference import ref_pooled, ref_step
from polyrec.perfmodel.tbe import update_merge_levels

#: benchmarks/tbe.py: its ``table_ids`` draws issue 4's uniform and skewed ids
TBE_BENCHMARK = load_benchmark("tbe")
#: Spacing of representable values just above 1 (the bound on one stochastic rounding, relative to the value).
ULP = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
#: Absolute allowance of an updated weight (initialised in [-0.5, 0.5]): values near zero, subnormal halves.
WEIGHT_FLOOR = 1e-6


@dataclass(frozen=True)
class Case:
    name: str
    tables: tuple[tuple[int, int, str], ...]  # (rows, dim, pooling)
    hots: tuple[int, ...]  # per feature, ids per bag (ragged: at most twice this)
    batch: int
    weight_dtype: torch.dtype
    optimizer: str
    chunks: int  # tiles per lane program the selector takes at this size (what the case covers)
    merge_chunks: int  # tiles per merge-level program it takes
    min_levels: int  # merge levels at least
    grad_dtype: torch.dtype = torch.float32
    skew: bool = True
    ragged: bool = False  # bag lengths uniform in [0, 2 * hots]: empty bags and odd lengths
    weighted: bool = False
    weight_decay: float = 0.0
    lr: float = 0.05
    features: tuple[int, ...] = ()  # each feature's table; () for one feature per table
    index_dtype: torch.dtype = torch.int64  # of the ids and offsets

    @property
    def feature_tables(self) -> list[int]:
        return list(self.features) if self.features else list(range(len(self.tables)))


CASES = [
    Case("one-dim fp32 rows, row-wise Adagrad, 10M ids", ((40, 128, "sum"), (3000, 128, "sum"), (200_000, 128, "sum"),
         (1_500_000, 128, "sum"), (2_500_000, 128, "sum")), (1, 4, 20, 100, 30), 65536, torch.float32,
         "rowwise_adagrad", chunks=8, merge_chunks=1, min_levels=9),
    Case("mixed dims, bf16 rows and gradient, weight decay", ((3, 16, "sum"), (5000, 64, "sum"), (400_000, 128, "sum"),
         (1_000_000, 32, "sum"), (50_000, 256, "sum")), (2, 6, 30, 12, 5), 40000, torch.bfloat16, "rowwise_adagrad",
         chunks=8, merge_chunks=1, min_levels=8, grad_dtype=torch.bfloat16, weight_decay=1e-3),
    Case("fp16 rows, mean and weighted ragged bags, Adagrad, odd batch", ((7, 64, "sum"), (20_000, 64, "mean"),
         (600_000, 64, "sum")), (3, 12, 50), 12345, torch.float16, "adagrad", chunks=8, merge_chunks=1, min_levels=6,
         ragged=True, weighted=True),
    Case("Adam, mixed dims, uniform ids", ((100_000, 128, "sum"), (2_000_000, 64, "sum"), (999, 32, "mean")),
         (8, 24, 2), 30000, torch.float32, "adam", chunks=8, merge_chunks=1, min_levels=7, skew=False),
    Case("SGD one-dim, bf16 gradient, weight decay", ((10, 128, "sum"), (800_000, 128, "sum"), (3_000_000, 128, "sum")),
         (2, 40, 60), 65536, torch.float32, "sgd", chunks=8, merge_chunks=1, min_levels=9, grad_dtype=torch.bfloat16,
         weight_decay=1e-3, lr=0.01),
    Case("tables shared by features, int32 ids and offsets", ((5000, 128, "sum"), (1_200_000, 128, "sum")),
         (3, 20, 40, 1, 7), 32768, torch.float32, "rowwise_adagrad", chunks=8, merge_chunks=1, min_levels=8,
         features=(0, 1, 1, 0, 1), index_dtype=torch.int32),
]


def bag_lengths(case: Case, hot: int, mean: bool, gen: torch.Generator) -> torch.Tensor:
    """[B] ids per bag: ``hot`` each, or ragged in [0, 2 * hot]; a mean bag's length (whose inverse scales
    its gradient) a power of two or zero."""
    if not case.ragged:
        assert not mean or hot & (hot - 1) == 0, "mean bags need power-of-two lengths"
        return torch.full((case.batch,), hot, device="cuda")
    if not mean:
        return torch.randint(0, 2 * hot + 1, (case.batch,), device="cuda", generator=gen)
    powers = 2 ** torch.randint(0, (2 * hot).bit_length(), (case.batch,), device="cuda", generator=gen)
    return torch.where(torch.rand(case.batch, device="cuda", generator=gen) < 0.1, 0, powers)


def make_batch(case: Case, gen: torch.Generator) -> JaggedBatch:
    lengths, values = [], []
    for table, hot in zip(case.feature_tables, case.hots):
        rows, _, pooling = case.tables[table]
        n = bag_lengths(case, hot, pooling == "mean", gen)
        values.append(TBE_BENCHMARK.table_ids(rows, int(n.sum()), case.skew, gen))
        lengths.append(n)
    ids = torch.cat(values)
    weights = torch.randint(2, 7, (ids.numel(),), device="cuda", generator=gen) / 4 if case.weighted else None
    batch = JaggedBatch.from_lengths(values=ids, lengths=torch.cat(lengths), batch_size=case.batch,
                                     num_features=len(case.hots), weights=weights)
    return JaggedBatch(values=batch.values.to(case.index_dtype), offsets=batch.offsets.to(case.index_dtype),
                       batch_size=case.batch, num_features=len(case.hots), weights=weights)


def module_states(module: TableBatchedEmbedding) -> list[list[torch.Tensor]]:
    """The module's optimizer state per table as float64 copies, laid out as ``init_states``'."""
    kind = module.optimizer.kind
    if kind == "sgd":
        return [[] for _ in module.tables]
    if kind == "adam":
        return [[m.double(), v.double()] for m, v in zip(module._split(module.state1), module._split(module.state2))]
    return [[s.double()] for s in module.table_state()]


def assert_near(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor, what: str) -> float:
    """|got - want| <= bound everywhere; returns the largest error as a fraction of its allowance (printed:
    how near the case is to failing)."""
    ratio = (got.double() - want).abs() / (bound + 1e-300)
    worst = int(ratio.argmax())
    assert float(ratio.view(-1)[worst]) <= 1, (
        f"{what}: element {worst} is {float(got.view(-1)[worst])}, float64 reference {float(want.view(-1)[worst])}")
    return float(ratio.view(-1)[worst])


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_training_steps_match_the_float64_reference(case):
    gen = torch.Generator(device="cuda").manual_seed(sum(map(ord, case.name)))
    specs = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p) for i, (r, d, p) in enumerate(case.tables)]
    features = case.feature_tables
    opt = EmbeddingOptimizer(kind=case.optimizer, lr=case.lr, weight_decay=case.weight_decay)
    module = TableBatchedEmbedding(specs, optimizer=opt, weight_dtype=case.weight_dtype, device="cuda",
                                   init_scale=0.5, output_dtype=case.grad_dtype, feature_to_table=features)
    # an updated value rounds once in the weight dtype; fp32 arithmetic adds ~1e-5 of it. A pooled value
    # sums in fp32 (error ~1e-5 of its terms' magnitudes) and rounds once to the output dtype.
    weight_rel = max(ULP[case.weight_dtype] * 1.01, 1e-5)
    output_rel = max(ULP[case.grad_dtype], 1e-5)
    for step in range(1, 3):
        batch = make_batch(case, gen)
        config = module._update_config(batch.nnz)
        assert (config.chunks, config.merge_chunks) == (case.chunks, case.merge_chunks), config
        assert (module.one_dim > 0) == (len({d for _, d, _ in case.tables}) == 1)
        assert update_merge_levels(batch.nnz, config.span, config.merge_chunks) >= case.min_levels
        weights = [w.double() for w in module.table_weights()]
        states = module_states(module)
        out = module(batch)
        magnitude = ref_pooled([w.abs() for w in weights], batch, specs, features)  # per-sample weights are > 0
        used = {"output": assert_near(out.detach(), ref_pooled(weights, batch, specs, features),
                                      output_rel * magnitude, f"step {step} pooled output")}
        grad = (torch.randint(-16, 17, out.shape, device="cuda", generator=gen) / 16).to(case.grad_dtype)
        out.backward(grad)
        module.check_errors()
        want_w, want_s = ref_step(weights, states, batch, grad, opt, step, specs, features)
        used["weights"] = max(assert_near(got, want, weight_rel * want.abs() + WEIGHT_FLOOR,
                                          f"step {step} table {t} weights")
                              for t, (got, want) in enumerate(zip(module.table_weights(), want_w)))
        # a state is its decayed previous value plus a new term (Adam's first moment: of either sign):
        # 1e-5 of their magnitudes, at most |state| + 2 |previous state|
        used["state"] = max([assert_near(g, w, 1e-5 * (w.abs() + 2 * p.abs()), f"step {step} table {t} state {i}")
                             for t, (got, want, prev) in enumerate(zip(module_states(module), want_s, states))
                             for i, (g, w, p) in enumerate(zip(got, want, prev))], default=0.0)
        print(f"{case.name}, step {step}: {batch.nnz} ids, {config}; largest error / allowance "
              + ", ".join(f"{k} {v:.3f}" for k, v in used.items()))


@pytest.mark.gpu
def test_deterministic_mode_is_bitwise_repeatable_at_scale():
    """Two modules with ``deterministic=True`` given the same batches and gradients (randn: sums that
    depend on their order) end bitwise equal: ties of the 10M-id sort kept in input order, the merge
    levels' fixed order, fp16 rows' rounding drawn from (seed, step)."""
    case = CASES[0]
    specs = [TableSpec(name=f"t{i}", rows=r, dim=d, pooling=p) for i, (r, d, p) in enumerate(case.tables)]
    gen = torch.Generator(device="cuda").manual_seed(7)
    batches = [make_batch(case, gen) for _ in range(2)]
    tables = []
    for _ in range(2):
        module = TableBatchedEmbedding(specs, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad", lr=0.05),
                                       weight_dtype=torch.float16, device="cuda", deterministic=True)
        grads = torch.Generator(device="cuda").manual_seed(8)
        for batch in batches:
            out = module(batch)
            out.backward(torch.randn(out.shape, device="cuda", generator=grads))
        tables.append(module.weights.clone())
    assert torch.equal(tables[0], tables[1])
