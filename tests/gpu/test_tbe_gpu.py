"""TableBatchedEmbedding on the GPU vs the float64 reference: every optimizer and precision, hot rows,
determinism. Run on the device machine: PYTHONPATH=. python3 -m pytest -q tests/gpu/test_tbe_gpu.py"""

from __future__ import annotations

import io
from copy import deepcopy

import pytest
import torch

from polyrec.kernels.jagged import JaggedBatch, JaggedBatchError
from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec
from polyrec.kernels.tbe_reference import init_states, ref_pooled, ref_step
from test_tbe_fuzz import GROUP_EDGE_CASES, check_group_edge_layout

TABLES = [TableSpec(name="big", rows=5000, dim=128), TableSpec(name="hot", rows=3, dim=64),
          TableSpec(name="mean", rows=100, dim=32, pooling="mean")]
FEATURES = [0, 1, 2, 0]
B = 96


def batch(gen: torch.Generator, weighted: bool) -> JaggedBatch:
    lengths = torch.randint(0, 9, (len(FEATURES) * B,), device="cuda", generator=gen)
    vals = [torch.randint(0, TABLES[t].rows, (int(lengths[i * B:(i + 1) * B].sum()),), device="cuda", generator=gen)
            for i, t in enumerate(FEATURES)]
    values = torch.cat(vals)
    weights = torch.rand(values.numel(), device="cuda", generator=gen) + 0.5 if weighted else None
    return JaggedBatch.from_lengths(values=values, lengths=lengths, batch_size=B, num_features=len(FEATURES),
                                    weights=weights)


@pytest.mark.gpu
@pytest.mark.parametrize("group_dims", [None, True], ids=["default", "grouped"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["sgd", "rowwise_adagrad", "adagrad", "adam"])
def test_steps_match_reference(kind, dtype, group_dims):
    """Also with one update launch per dim group (dims 128, 64, 32), which the default takes only on long
    updates."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    opt = EmbeddingOptimizer(kind=kind, lr=0.02, weight_decay=0.001)
    module = TableBatchedEmbedding(TABLES, optimizer=opt, feature_to_table=FEATURES, weight_dtype=dtype, device="cuda",
                                   group_dims=group_dims)
    weights = [w.double().clone() for w in module.table_weights()]
    states = init_states(opt, TABLES, device="cuda")
    tol = 1e-5 if dtype == torch.float32 else (2e-3 if dtype == torch.float16 else 1.6e-2)
    for step in range(1, 4):
        b = batch(gen, weighted=step == 2)
        out = module(b)
        torch.testing.assert_close(out.detach().double(), ref_pooled(weights, b, TABLES, FEATURES), rtol=tol,
                                   atol=1e-5)
        grad = torch.randn(out.shape, device="cuda", generator=gen)
        out.backward(grad)
        weights, states = ref_step(weights, states, b, grad, opt, step, TABLES, FEATURES)
        for got, want in zip(module.table_weights(), weights):
            torch.testing.assert_close(got.double(), want, rtol=tol, atol=1e-5)
        weights = [w.double().clone() for w in module.table_weights()]


@pytest.mark.gpu
def test_deterministic_bitwise_and_bad_ids():
    def run() -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(1)
        module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad"),
                                       feature_to_table=FEATURES, weight_dtype=torch.float16, device="cuda",
                                       deterministic=True)
        for _ in range(3):
            out = module(batch(gen, False))
            out.backward(torch.randn(out.shape, device="cuda", generator=gen))
        return module.weights.clone()

    assert torch.equal(run().view(torch.int16), run().view(torch.int16))
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES,
                                   device="cuda")
    b = batch(torch.Generator(device="cuda").manual_seed(2), False)
    b.values[int(b.offsets[B])] = 3  # feature 1 reads 'hot' (3 rows)
    module(b)
    with pytest.raises(JaggedBatchError, match="feature 1 \\(table 'hot'"):
        module.check_errors()


@pytest.mark.gpu
def test_a_module_after_a_lookup_copies_and_saves():
    """A GPU lookup leaves a CUDA event for its flags' copy: deepcopy and torch.save still work, and the copy
    reports the bad id the original saw."""
    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd"), feature_to_table=FEATURES,
                                   device="cuda")
    b = batch(torch.Generator(device="cuda").manual_seed(3), False)
    b.values[int(b.offsets[B])] = 3  # feature 1 reads 'hot' (3 rows)
    module(b)
    assert module._pending_flags is not None and module._pending_flags[1] is not None
    buffer = io.BytesIO()
    torch.save(module, buffer)
    copy = deepcopy(module)
    assert torch.equal(copy.weights, module.weights)
    with pytest.raises(JaggedBatchError, match="feature 1 \\(table 'hot'"):
        copy.check_errors()
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    with pytest.raises(JaggedBatchError, match="feature 1 \\(table 'hot'"):
        loaded.check_errors()


@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_a_prepared_backward_updates_bitwise_as_one_that_sorts(weighted):
    """``prepare_backward`` (sharded embeddings run it under the pooled all-to-all) on the GPU: the
    next backward of the same batch, with a contiguous or a strided gradient, updates bitwise as one
    that sorts itself (deterministic mode: stable sort, fixed rounding stream)."""
    def run(prepare: bool) -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(4)
        module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="adagrad"), feature_to_table=FEATURES,
                                       device="cuda", deterministic=True)
        for step in range(3):
            b = batch(gen, weighted)
            out = module(b)
            if prepare:
                module.prepare_backward(b)
            wide = torch.randn(B, out.shape[1] + 8 * step, device="cuda", generator=gen)
            out.backward(wide[:, 8 * step:])  # contiguous at step 0, strided after
        return module.weights.clone()

    assert torch.equal(run(True), run(False))


@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_staged_loads_give_the_same_pooled_rows(weighted):
    """``STAGED`` only moves barriers between the loads and the sums: every HOTS = 1 and HOTS = 4
    candidate gives bitwise the same output with and without it."""
    from polyrec.kernels import tbe_select

    module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="sgd", lr=0.1),
                                   feature_to_table=FEATURES, device="cuda", seed=4)
    b = batch(torch.Generator(device="cuda").manual_seed(8), weighted)
    ids = torch.arange(len(FEATURES), dtype=torch.int32, device="cuda")
    for cfg in tbe_select.forward_candidates(module.block_d, 32):
        outs = []
        for staged in (False, True):
            module.staged_forward = staged
            out = torch.full((b.batch_size, module.output_dim), float("nan"), device="cuda")
            module.launch_pooled(b, out, ids, cfg)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]) and not outs[0].isnan().any(), cfg


@pytest.mark.gpu
def test_a_backward_on_its_own_stream_updates_bitwise_as_on_the_current_one():
    """``backward_stream`` (sharded embeddings run the update there, beside DDP's tail): with the user
    ordering it after the gradient and the current stream after it, the tables end bitwise as with
    the backward on the current stream, even when that stream is late (a sleep first) and the tensors
    it reads are dropped and their memory rewritten on the current stream before it runs."""
    def run(beside: bool) -> torch.Tensor:
        gen = torch.Generator(device="cuda").manual_seed(5)
        module = TableBatchedEmbedding(TABLES, optimizer=EmbeddingOptimizer(kind="rowwise_adagrad"),
                                       feature_to_table=FEATURES, device="cuda", deterministic=True)
        current, side = torch.cuda.current_stream(), torch.cuda.Stream()
        for _ in range(3):
            b = batch(gen, True)
            out = module(b)
            module.prepare_backward(b)
            grad = torch.randn(out.shape, device="cuda", generator=gen)
            if not beside:
                out.backward(grad)
                continue
            side.wait_stream(current)
            with torch.cuda.stream(side):
                torch.cuda._sleep(20_000_000)  # ~10 ms late
            module.backward_stream = side
            out.backward(grad)
            module.backward_stream = None
            shapes = [t.shape for t in (grad, b.values, b.offsets, b.weights)]
            del out, grad, b
            junk = [torch.full(s, 7, device="cuda") for s in shapes for _ in range(4)]
            current.wait_stream(side)
            del junk
        return module.weights.clone()

    assert torch.equal(run(True), run(False))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["lane", "scan"])
@pytest.mark.parametrize("layout", sorted(GROUP_EDGE_CASES))
def test_grouped_tiles_at_other_groups_keys_update_their_own_rows(layout, variant):
    """The dim-group edge layouts of the interpreter's regression test, on the GPU (the random reference
    test above passed on the GPU before the bound fix: its tiles never ended on another group's keys)."""
    check_group_edge_layout(layout, variant, "cuda")
