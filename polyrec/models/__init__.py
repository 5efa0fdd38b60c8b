"""DLRM and DLRM-DCNv2 built from config dataclasses and polyrec's kernels (or their torch references)."""

from polyrec.models.config import PRESETS, ModelConfig, preset
from polyrec.models.dlrm import DLRM, default_backends
from polyrec.models.embeddings import EmbeddingOptimConfig

__all__ = ["DLRM", "PRESETS", "EmbeddingOptimConfig", "ModelConfig", "default_backends", "preset"]
