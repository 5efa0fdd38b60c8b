"""Training runtime: the trainer, checkpoints and metrics (single device; sharding comes later)."""

from polyrec.runtime.config import TrainConfig
from polyrec.runtime.train_loop import TrainResult
from polyrec.runtime.trainer import Trainer

__all__ = ["TrainConfig", "TrainResult", "Trainer"]
