"""make demo's synthetic task (dcnv2-small, 600 steps of 512, 3 seeds) trained with fp16 / bf16 embedding rows
by two checkouts (the rounding before and after 5634744), and fp32 rows by the second as the reference: the test
AUC each reaches. One fresh process per checkout and row dtype (``checkout_ab.run_child``).

    PYTHONPATH=.:benchmarks python3 rows_auc.py BASE_DIR CHANGE_DIR  (writes $OUT/rows_auc.json)
"""
import json
import os
import sys
from pathlib import Path

from checkout_ab import run_child

CHILD = r'''
import json, sys
import polyrec
from polyrec.runtime import TrainConfig, Trainer
aucs = []
for seed in (0, 1, 2):
    cfg = TrainConfig(preset="dcnv2-small", data="synthetic", steps=600, batch_size=512, seed=seed, log_every=600,
                      device="cuda", cuda_graphs=False, embedding_dtype=sys.argv[1])
    aucs.append(Trainer(cfg, progress=False).train().final_auc)
print(json.dumps({"polyrec_file": polyrec.__file__, "rows": sys.argv[1], "test_auc": aucs}))
'''
rows = []
for code, checkout, dtypes in (("base", sys.argv[1], ("fp16", "bf16")), ("change", sys.argv[2], ("fp32", "fp16", "bf16"))):
    for dtype in dtypes:
        row = run_child(Path(checkout).resolve(), CHILD, [dtype], f"{dtype} rows") | {"code": code}
        rows.append(row)
        print(json.dumps(row), flush=True)
Path(os.environ["OUT"], "rows_auc.json").write_text(json.dumps(rows, indent=1))
