"""Training runtime: the trainer, checkpoints and metrics (single device; sharding comes later)."""

from polyrec.runtime.config import TrainConfig
from polyrec.runtime.trainer import Trainer, TrainResult

__all__ = ["TrainConfig", "TrainResult", "Trainer"]
