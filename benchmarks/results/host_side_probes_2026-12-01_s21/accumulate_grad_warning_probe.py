"""When does torch's "AccumulateGrad node's stream does not match" warning fire in a graphed run: at the
capture only, or every step? Counts it per step with every warning shown (dcnv2-small, batch 16384,
graphed); JSON to argv[1]."""
import json
import sys
import warnings

from polyrec.runtime import TrainConfig, Trainer

MATCH = "AccumulateGrad node's stream does not match"
trainer = Trainer(TrainConfig(preset="dcnv2-small", batch_size=16384, row_cap=4_000_000, steps=10**6, synthetic_pool=4,
                              cuda_graphs=True), progress=False)
per_step = []
for step in range(8):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train_step()
        trainer.sync()
    per_step.append(sum(MATCH in str(w.message) for w in caught))
print(json.dumps({"warnings_per_step": per_step}))
json.dump({"warnings_per_step": per_step, "graphed": trainer._graphed}, open(sys.argv[1], "w"))
