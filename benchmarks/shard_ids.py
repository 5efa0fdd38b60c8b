"""The ids and the distinct rows each rank's table shards receive in one step of the trainer's synthetic
data: what the embedding update's time follows (its gradient slices per id, its row reads and writes
per distinct row), counted rather than modelled.

One batch of ``world x batch_per_gpu`` samples drawn as ``SyntheticSource`` draws them (each rank's
stream has the same distribution; the step's tables see every rank's samples), split by the shards'
row ranges. ``multi_gpu.py --profile`` adds the counts beside each rank's kernel table.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from polyrec.data.synthetic import DEFAULT_ZIPF_ALPHA, TRAIN_STREAM, SyntheticSource
from polyrec.runtime.shards import Shard


def ids_by_rank(config, shards: Sequence[Shard], world: int, batch_per_gpu: int, *,
                device: torch.device | str, distribution: str = "zipf", alpha: float = DEFAULT_ZIPF_ALPHA,
                seed: int = 0) -> list[dict]:
    """Per rank: its shards (``polyrec.runtime.shards.make_shards``), the ids they receive in one step
    and the distinct rows among them (a column shard receives all of its table's ids)."""
    source = SyntheticSource(config, batch_size=world * batch_per_gpu, seed=seed, device=device,
                             distribution=distribution, alpha=alpha)
    per_table = torch.split(source.batch(TRAIN_STREAM, 0).values, source.feature_sizes)  # feature t reads table t
    counts = [{"rank": r, "shards": 0, "ids": 0, "unique_rows": 0} for r in range(world)]
    for shard in shards:
        ids = per_table[shard.table]
        mine = ids[(ids >= shard.rows[0]) & (ids < shard.rows[1])]
        counts[shard.rank]["shards"] += 1
        counts[shard.rank]["ids"] += mine.numel()
        counts[shard.rank]["unique_rows"] += torch.unique(mine).numel()
    return counts
