"""Stops at the edges of a run: a signal during its last step."""

from __future__ import annotations

import json
import signal

from polyrec.runtime import TrainConfig, Trainer


def test_a_signal_during_the_last_step_still_evaluates_it(tmp_path):
    """SIGTERM while the last step ran: the run is done, with its last evaluation (it ended "sigterm" without
    one, and a resume to the same --steps had nothing left to train, so the final AUC was never measured)."""
    cfg = TrainConfig(steps=4, batch_size=32, row_cap=1000, log_every=2, eval_every=2, checkpoint_dir=tmp_path,
                      device="cpu", cpu_threads=1)
    trainer = Trainer(cfg, progress=False)
    train_step = trainer.train_step

    def signalled_step():
        loss = train_step()
        if trainer.step == cfg.steps:
            signal.raise_signal(signal.SIGTERM)
        return loss

    trainer.train_step = signalled_step
    result = trainer.train()
    assert (result.status, result.step, [e["step"] for e in result.evals]) == ("done", 4, [2, 4])
    assert result.checkpoint == tmp_path / "checkpoint.pt"
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["event"], r["step"]) for r in logged if r["event"] in ("eval", "end")] == [
        ("eval", 2), ("eval", 4), ("end", 4)]
    assert logged[-1]["status"] == "done"
