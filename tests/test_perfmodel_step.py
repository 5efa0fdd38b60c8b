"""Whole-step time model: terms, slowest-rank rule and overlap, against hand-computed cases."""

from __future__ import annotations

import pytest
import torch

from polyrec.perfmodel.step import DDP_BUCKET_BYTES, Contention, StepParts, beside, exposed_all_reduce, step_time


def _parts(**kw) -> StepParts:
    base = dict(embedding_fwd_s=[1.0, 2.0], embedding_bwd_s=[3.0, 1.0], dense_fwd_s=[4.0, 4.0], dense_bwd_s=[8.0, 8.0],
                dense_optimizer_s=[0.5, 0.5], other_s=[0.25, 0.25], input_all_to_all_s=0.1, output_all_to_all_s=0.2,
                grad_all_to_all_s=0.2, all_reduce_s=2.0, all_reduce_bytes=4.0 * DDP_BUCKET_BYTES)
    return StepParts(**(base | kw))


def test_no_overlap_sums_slowest_ranks():
    t = step_time(_parts(overlap="none"))
    assert t.embedding_fwd_s == 2.0 and t.embedding_bwd_s == 3.0
    assert t.all_to_all_s == pytest.approx(0.5)
    assert t.total_s == pytest.approx(2 + 3 + 4 + 8 + 0.5 + 2 + 0.5 + 0.25)
    assert t.overlap_s == 0


#: What ``ddp`` hides of ``_parts`` besides the all-reduce and the gradient exchange: the input
#: all-to-all (0.1 s, a step ahead) and, with no collective between a rank's embedding backward and
#: its next lookup, max forward + max backward (2 + 3) less the slowest rank's sum (1 + 3): 1.0 s.
INPUTS_AHEAD = 0.1 + 1.0


def test_ddp_hides_all_but_last_bucket_and_the_optimizer_under_the_gradient_exchange():
    t = step_time(_parts(overlap="ddp"))
    # 4 buckets: the last (0.5 s) is exposed, the other 1.5 s fit under the 8 s backward; the dense
    # optimizer (0.5 s) runs during the 0.2 s gradient all-to-all
    assert t.overlap_s == pytest.approx(1.5 + 0.2 + INPUTS_AHEAD)
    assert t.total_s == pytest.approx(2 + 3 + 4 + 8 + 0.5 + 0.5 + 0.5 + 0.25 - 0.2 - INPUTS_AHEAD)
    assert step_time(_parts(overlap="ddp", grad_all_to_all_s=0.0)).overlap_s == pytest.approx(1.5 + INPUTS_AHEAD)


def test_ddp_hides_the_input_exchange_and_costs_the_slowest_ranks_embedding_chain():
    # rank 0 spends 1 + 3 s in its embedding phases, rank 1 2 + 1 s: the step pays 4 s, not 2 + 3
    t = step_time(_parts(overlap="ddp", input_all_to_all_s=0.0, grad_all_to_all_s=0.0))
    assert t.overlap_s == pytest.approx(1.5 + 1.0)
    balanced = step_time(_parts(overlap="ddp", input_all_to_all_s=0.0, grad_all_to_all_s=0.0,
                                embedding_fwd_s=[1.0, 3.0], embedding_bwd_s=[3.0, 1.0]))
    assert balanced.overlap_s == pytest.approx(1.5 + 2.0)  # 3 + 3 - 4
    # the input exchange hides under the dense work there is, no more
    tight = step_time(_parts(overlap="ddp", input_all_to_all_s=1.0, dense_fwd_s=[0.1, 0.1], dense_bwd_s=[0.2, 0.2],
                             grad_all_to_all_s=0.0, all_reduce_s=0.0))
    assert tight.overlap_s == pytest.approx(0.3 + 1.0)
    assert step_time(_parts(overlap="none")).overlap_s == 0


def test_ddp_exposes_what_outlasts_the_backward():
    assert exposed_all_reduce(10.0, 4.0 * DDP_BUCKET_BYTES, 1.0) == pytest.approx(2.5 + 6.5)
    assert exposed_all_reduce(1.0, DDP_BUCKET_BYTES / 2, 5.0) == pytest.approx(1.0)
    assert exposed_all_reduce(0.0, 0.0, 5.0) == 0.0


def test_pipeline_also_hides_all_to_all():
    t = step_time(_parts(overlap="pipeline"))
    assert t.overlap_s == pytest.approx(1.5 + 0.5)
    tight = step_time(_parts(overlap="pipeline", dense_fwd_s=[0.1, 0.1], dense_bwd_s=[0.1, 0.1], all_reduce_s=0.0))
    assert tight.overlap_s == pytest.approx(0.2)  # no more than the dense compute there is to hide under


def test_ddp_hides_each_ranks_id_sort_under_the_pooled_all_to_all():
    # rank 0: fwd 1 + bwd 3.0 of which sort 0.5 -> 0.2 hidden (the exchange's 0.2 s): 3.8; rank 1: 2 + 1 - 0.1
    t = step_time(_parts(overlap="ddp", embedding_sort_s=[0.5, 0.1]))
    assert t.overlap_s == pytest.approx(1.5 + 0.2 + 0.1 + (5.0 - 3.8))  # all-reduce, optimizer, input, chain
    # the busier rank's chain bounds the step: rank 1's sort does not help while rank 0 is longer
    t = step_time(_parts(overlap="ddp", embedding_sort_s=[0.0, 0.1]))
    assert t.overlap_s == pytest.approx(1.5 + 0.2 + INPUTS_AHEAD)
    assert step_time(_parts(overlap="none", embedding_sort_s=[0.5, 0.1])).overlap_s == 0


def test_an_early_gradient_exchange_hides_the_dense_backward_tail_and_no_longer_the_optimizer():
    # the exchange (0.2 s) starts with 0.1 s of dense backward left: the tail hides, the optimizer (0.5 s)
    # waits for DDP's last bucket, which NCCL runs after the exchange
    t = step_time(_parts(overlap="ddp", gradient_tail_s=[0.1, 0.1]))
    assert t.overlap_s == pytest.approx(1.5 + 0.1 + INPUTS_AHEAD)
    assert t.total_s == pytest.approx(2 + 3 + 4 + 8 + 0.5 + 0.5 + 0.5 + 0.25 - 0.1 - INPUTS_AHEAD)
    assert step_time(_parts(overlap="ddp", gradient_tail_s=[0.3, 0.3])).overlap_s == pytest.approx(1.5 + 0.2 + INPUTS_AHEAD)
    assert step_time(_parts(overlap="none", gradient_tail_s=[0.3, 0.3])).overlap_s == 0
    pipelined = _parts(overlap="pipeline")
    assert step_time(_parts(overlap="pipeline", gradient_tail_s=[0.3, 0.3])).total_s == step_time(pipelined).total_s
    assert step_time(_parts(overlap="ddp", gradient_tail_s=None)).overlap_s == pytest.approx(1.5 + 0.2 + INPUTS_AHEAD)


def test_the_early_exchange_follows_the_timeline_from_the_input_gradient(rng):
    # from the moment x0's gradient is final, with gather g, tail T, exchange A, last bucket L, optimizer O:
    # before, compute ran T, waited for L, then g, then A with O inside it: T + L + g + max(A, O); now
    # it runs g then T while NCCL runs A then L (L's bucket is made at the end of T): g + max(T, A) + L + O
    for _ in range(50):
        g, tail, a2a, opt = (float(x) for x in torch.rand(4, generator=rng))
        kw = dict(other_s=[g], dense_bwd_s=[tail + 2.0], grad_all_to_all_s=a2a, dense_optimizer_s=[opt],
                  embedding_fwd_s=[1.0], embedding_bwd_s=[1.0], dense_fwd_s=[1.0])
        last = 0.5  # of the 2.0 s all-reduce in 4 buckets; the rest hides under the backward
        before = step_time(_parts(overlap="ddp", **kw)).total_s
        now = step_time(_parts(overlap="ddp", gradient_tail_s=[tail], **kw)).total_s
        assert now - before == pytest.approx((g + max(tail, a2a) + last + opt) - (tail + last + g + max(a2a, opt)))


def test_the_early_exchange_is_judged_per_rank():
    # rank 0: tail 0.3, optimizer 0.1 -> max(0.3, 0.2) + 0.1 = 0.4; rank 1: tail 0.1, optimizer 0.5
    # -> max(0.1, 0.2) + 0.5 = 0.7. The terms add the slowest: 0.3 + 0.2 + 0.5 = 1.0, so 0.3 hides
    t = step_time(_parts(overlap="ddp", gradient_tail_s=[0.3, 0.1], dense_optimizer_s=[0.1, 0.5]))
    assert t.overlap_s == pytest.approx(1.5 + 0.3 + INPUTS_AHEAD)
    with pytest.raises(ValueError):
        step_time(_parts(overlap="ddp", gradient_tail_s=[0.3]))


def test_cpu_bound_step_takes_the_cpu_time():
    fast = dict(embedding_fwd_s=[0.1], embedding_bwd_s=[0.1], dense_fwd_s=[0.1], dense_bwd_s=[0.1],
                dense_optimizer_s=[0.0], other_s=[0.0], all_reduce_s=0.0, overlap="none")
    t = step_time(StepParts(**fast, host_s=[1.0]))
    assert t.host_excess_s == pytest.approx(0.6) and t.total_s == pytest.approx(1.0)
    assert step_time(StepParts(**fast, host_s=[0.2])).total_s == pytest.approx(0.4)


def test_bad_overlap():
    with pytest.raises(ValueError, match="overlap"):
        step_time(_parts(overlap="magic"))


def test_a_collective_beside_compute_hides_what_its_contention_leaves(rng):
    # the work beside the exchange runs at half speed while it does: 2 s of work beside a 1 s exchange
    # take 2.5 s together (0.5 s hidden); 0.4 s of work finish inside it (all 0.4 s hidden)
    assert beside(1.0, 2.0, 0.5) == pytest.approx(0.5)
    assert beside(1.0, 0.4, 0.5) == pytest.approx(0.4)
    for comm, work in torch.rand(20, 2, generator=rng).tolist():
        assert beside(comm, work, 0.0) == pytest.approx(min(comm, work))
        assert 0.0 <= beside(comm, work, 1.0) <= min(comm, work)


def test_ddp_overlaps_pay_the_contention_of_what_they_run_beside():
    # all-reduce 1.5 s under the 8 s backward at 0.5: 0.75 hidden; gradient exchange 0.2 s beside the
    # 0.5 s optimizer (memory-bound, 0.25): 0.15; input exchange 0.1 s under 12 s of dense work: 0.05
    contended = _parts(overlap="ddp", contention=Contention(compute_bound=0.5, memory_bound=0.25))
    t = step_time(contended)
    assert t.overlap_s == pytest.approx(0.75 + 0.15 + 0.05 + 1.0)
    assert step_time(_parts(overlap="ddp")).overlap_s - t.overlap_s == pytest.approx(0.5 * 1.5 + 0.25 * 0.2 + 0.5 * 0.1)
