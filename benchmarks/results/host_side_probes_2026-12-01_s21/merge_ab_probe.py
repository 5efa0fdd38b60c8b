"""In one process, the same trainer's steps with the TBE's merge levels at 1 and at 8 tiles per program
(``UpdateConfig.merge_chunks``; everything else as selected), alternating blocks; JSON to argv[1].

    PYTHONPATH=<checkout> python3 merge_ab_probe.py OUT.json
"""
import dataclasses
import json
import statistics
import sys

import torch

from polyrec.runtime import TrainConfig, Trainer

CONFIGS = (("dcnv2-small", 16384, True), ("mlperf-dcnv2", 16384, True), ("mlperf-dcnv2", 65536, False))
ROUNDS, WARMUP, STEPS = 6, 2, 15


def probe(preset: str, batch: int, graphs: bool) -> list[dict]:
    cfg = TrainConfig(preset=preset, batch_size=batch, row_cap=4_000_000, steps=10**6, synthetic_pool=4,
                      cuda_graphs=graphs)
    trainer = Trainer(cfg, progress=False)
    trainer.benchmark(warmup=5, steps=5)
    tbe = trainer.model.embeddings.tbe
    chosen = next(v for k, v in tbe._configs.items() if k[0] == "upd")
    rows = []
    for r in range(ROUNDS):
        for m in ((1, 8) if r % 2 == 0 else (8, 1)):
            tbe.update_config = dataclasses.replace(chosen, merge_chunks=m)
            got = trainer.benchmark(warmup=WARMUP, steps=STEPS)
            rows.append({"preset": preset, "batch": batch, "cuda_graphs": graphs, "round": r, "merge_chunks": m,
                         "selected": dataclasses.asdict(chosen), **{k: got[k] for k in (
                             "median_step_ms", "ms_per_step", "emb_bwd_ms", "emb_bwd_host_ms") if k in got}})
    del trainer
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    rows = []
    for preset, batch, graphs in CONFIGS:
        got = probe(preset, batch, graphs)
        rows += got
        for m in (1, 8):
            mine = [r for r in got if r["merge_chunks"] == m]
            print(preset, batch, "graphs" if graphs else "eager", "merge_chunks", m,
                  {k: round(statistics.median(r[k] for r in mine), 3) for k in mine[0] if k.endswith("_ms")},
                  flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
