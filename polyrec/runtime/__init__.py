"""Training runtime: the trainer, checkpoints, metrics, and the embeddings sharded over several ranks."""

from polyrec.runtime.config import TrainConfig
from polyrec.runtime.train_loop import TrainResult
from polyrec.runtime.trainer import Trainer

__all__ = ["TrainConfig", "TrainResult", "Trainer"]
