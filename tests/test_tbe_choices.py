"""The embedding module's launch choices as a function of what it is asked, not of what it was asked before."""

from __future__ import annotations

from polyrec.kernels.tbe import EmbeddingOptimizer, TableBatchedEmbedding, TableSpec


def test_a_deterministic_backward_tiles_a_batch_as_a_fresh_module_would():
    """The update config and the dim groups are kept per power-of-two bucket of ids; they were priced at the first
    batch of the bucket, so a module that had seen other batches could tile one otherwise than a fresh (resumed)
    module and sum its duplicates in another order (the TBE fuzz's seed 20067: one fp32 ulp). Deterministic, every
    batch of the bucket gets the fresh module's choice; the bucket is one where the choice moves with the ids."""
    tables = [TableSpec(name=f"t{i}", rows=rows, dim=dim, pooling="mean")
              for i, (rows, dim) in enumerate([(6, 4), (27, 128), (182, 64)])]

    def module(deterministic: bool) -> TableBatchedEmbedding:
        return TableBatchedEmbedding(tables, optimizer=EmbeddingOptimizer(kind="adam", lr=0.2),
                                     deterministic=deterministic)

    fresh = {nnz: module(False)._update_config(nnz) for nnz in (64, 100)}
    assert fresh[64] != fresh[100]  # priced at its own ids, the bucket's batches are tiled otherwise
    seen = module(True)
    seen.plan_configs(seen.key_plan(64), 64)
    for nnz in range(64, 128):
        new = module(True)
        assert new.plan_configs(new.key_plan(nnz), nnz) == seen.plan_configs(seen.key_plan(nnz), nnz), nnz
