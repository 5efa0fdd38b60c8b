"""Model configs and presets: DLRM (dot interaction) and DLRM-DCNv2 (low-rank cross network).

Presets are plain functions returning a config (torchtitan's ``config_registry.py`` style); look them
up by name with :func:`preset`. Sizes come from the reference implementations cited next to each.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from dataclasses import dataclass

#: Rows per table of the 26 categorical features of MLPerf Training's DLRM-DCNv2 (Criteo 1TB, hashed
#: to at most 40M rows; 204,184,588 rows in all). Source: mlcommons/training,
#: recommendation_v2/torchrec_dlrm/README.md, ``--num_embeddings_per_feature``.
MLPERF_TABLE_ROWS: tuple[int, ...] = (
    40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209, 11938,
    155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36)

#: Lookups per sample of each feature in MLPerf's synthetic multi-hot Criteo (214 in all). Source: same
#: README, ``--multi_hot_sizes``.
MLPERF_MULTI_HOT: tuple[int, ...] = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)

#: Rows per table of the Criteo Kaggle (Display Advertising Challenge) categorical features, as
#: preprocessed by the DLRM reference. Source: facebookresearch/dlrm, bench/dlrm_s_criteo_kaggle.sh
#: and the torchrec DLRM example's comment "Kaggle: 1460,583,...".
KAGGLE_TABLE_ROWS: tuple[int, ...] = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992,
    5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)

#: Dense (integer) features in a Criteo row. Source: Criteo's dataset description (I1..I13).
CRITEO_NUM_DENSE = 13


#: The most rows a table may have: row ids are int64 (torch.int64's largest value).
MAX_TABLE_ROWS = 2**63 - 1
#: ModelConfig's fields that are sizes or counts (a number or a tuple of numbers), whole numbers all.
SIZE_FIELDS = ("num_dense", "table_rows", "embedding_dim", "multi_hot", "bottom_mlp", "top_mlp", "dcn_layers",
               "dcn_rank")


def _values(field_value: object) -> tuple:
    return tuple(field_value) if isinstance(field_value, (tuple, list)) else (field_value,)


def _whole(value: object) -> bool:
    """An int (numpy's too), not a bool or a float."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """A DLRM-family model. Layer lists give output sizes; input sizes follow from the layer before."""

    name: str  # preset name or a user label
    num_dense: int  # dense input features per sample
    table_rows: tuple[int, ...]  # rows of each embedding table, one table per categorical feature
    embedding_dim: int  # D, columns of every table (the interaction needs one D)
    multi_hot: tuple[int, ...]  # lookups per sample of each feature (synthetic data; 1 = one-hot)
    bottom_mlp: tuple[int, ...]  # bottom MLP output sizes; the last must equal embedding_dim
    top_mlp: tuple[int, ...]  # top MLP output sizes; the last is 1 (the logit)
    interaction: str  # "dot" (DLRM) or "dcnv2" (low-rank cross network over the concatenation)
    dcn_layers: int = 0  # cross layers (dcnv2 only)
    dcn_rank: int = 0  # low rank r of each cross layer (dcnv2 only)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @property
    def interaction_dim(self) -> int:
        """Width of the top MLP's input."""
        f = self.num_tables + 1  # embeddings plus the bottom MLP output
        if self.interaction == "dot":
            return self.embedding_dim + f * (f - 1) // 2
        return f * self.embedding_dim

    def validate(self) -> None:
        not_whole = [f"{name}={getattr(self, name)!r}" for name in SIZE_FIELDS
                     if not all(_whole(v) for v in _values(getattr(self, name)))]
        if not_whole:  # a float or bool size passed these checks and failed later, inside nn.Linear
            raise ValueError(f"model config {self.name!r}: sizes must be whole numbers, got " + ", ".join(not_whole))
        problems = []
        if self.interaction not in ("dot", "dcnv2"):
            problems.append(f"interaction must be 'dot' or 'dcnv2', got {self.interaction!r}")
        if len(self.multi_hot) != len(self.table_rows):
            problems.append(f"multi_hot has {len(self.multi_hot)} entries for {len(self.table_rows)} tables")
        if not self.bottom_mlp or self.bottom_mlp[-1] != self.embedding_dim:
            problems.append(f"bottom_mlp must end in embedding_dim={self.embedding_dim}, got {self.bottom_mlp}")
        if not self.top_mlp or self.top_mlp[-1] != 1:
            problems.append(f"top_mlp must end in 1 (the logit), got {self.top_mlp}")
        if self.interaction == "dcnv2" and (self.dcn_layers < 1 or self.dcn_rank < 1):
            problems.append("dcnv2 needs dcn_layers >= 1 and dcn_rank >= 1")
        if self.interaction == "dot" and (self.dcn_layers or self.dcn_rank):  # no cross layer would be built
            problems.append(f"dcn_layers and dcn_rank are for dcnv2 only, got dcn_layers={self.dcn_layers}, "
                            f"dcn_rank={self.dcn_rank} with interaction 'dot'")
        for name in ("num_dense", "embedding_dim"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        if not self.table_rows:
            problems.append("needs at least one table (one per categorical feature)")
        for name in ("table_rows", "multi_hot", "bottom_mlp", "top_mlp"):
            if any(size < 1 for size in getattr(self, name)):
                problems.append(f"{name} sizes must be positive, got {getattr(self, name)}")
        if any(rows > MAX_TABLE_ROWS for rows in self.table_rows):
            problems.append(f"table_rows must be at most {MAX_TABLE_ROWS} (row ids are int64), got {self.table_rows}")
        if problems:
            raise ValueError(f"model config {self.name!r}: " + "; ".join(problems))

    def replace(self, **changes) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def with_capped_rows(self, cap: int) -> ModelConfig:
        """The same model with every table cut to at most ``cap`` rows."""
        if not _whole(cap):
            raise ValueError(f"model config {self.name!r}: a row cap must be a whole number, got {cap!r}")
        return self.replace(table_rows=tuple(min(r, cap) for r in self.table_rows))

    def cap_cutting_to(self, rows: tuple[int, ...]) -> int | None:
        """The row cap (``with_capped_rows``) that cuts this model's tables to ``rows``: their largest, where that
        cap gives them (None: no cap does, or ``rows`` are this model's own)."""
        rows = tuple(rows)
        if not rows or rows == self.table_rows:
            return None
        cap = max(rows)
        return cap if self.with_capped_rows(cap).table_rows == rows else None

    def embedding_bytes(self, bytes_per_value: int = 4) -> int:
        return sum(self.table_rows) * self.embedding_dim * bytes_per_value


def mlperf_dcnv2() -> ModelConfig:
    """MLPerf Training DLRM-DCNv2, full size (204M rows x 128, 104.5 GB of fp32 weights).

    Source: mlcommons/training recommendation_v2/torchrec_dlrm README: ``--embedding_dim 128
    --dense_arch_layer_sizes 512,256,128 --over_arch_layer_sizes 1024,1024,512,256,1
    --interaction_type=dcn --dcn_num_layers=3 --dcn_low_rank_dim=512``.
    """
    return ModelConfig(name="mlperf-dcnv2", num_dense=CRITEO_NUM_DENSE, table_rows=MLPERF_TABLE_ROWS,
                       embedding_dim=128, multi_hot=MLPERF_MULTI_HOT, bottom_mlp=(512, 256, 128),
                       top_mlp=(1024, 1024, 512, 256, 1), interaction="dcnv2", dcn_layers=3, dcn_rank=512)


#: Row cap of dcnv2-small: 50k rows x 16 dims keeps the 26 tables at 33 MB (fp32), laptop-sized.
SMALL_ROW_CAP = 50_000
#: Lookup cap of dcnv2-small: MLPerf's multi-hot sizes cut to at most 4 per feature (64 per sample).
SMALL_MULTI_HOT_CAP = 4


def dcnv2_small() -> ModelConfig:
    """DLRM-DCNv2 scaled down to train in a minute on a laptop CPU (same structure as MLPerf's)."""
    return ModelConfig(name="dcnv2-small", num_dense=CRITEO_NUM_DENSE,
                       table_rows=tuple(min(r, SMALL_ROW_CAP) for r in MLPERF_TABLE_ROWS), embedding_dim=16,
                       multi_hot=tuple(min(h, SMALL_MULTI_HOT_CAP) for h in MLPERF_MULTI_HOT),
                       bottom_mlp=(64, 32, 16), top_mlp=(128, 64, 1), interaction="dcnv2", dcn_layers=2,
                       dcn_rank=32)


def dlrm_criteo_kaggle() -> ModelConfig:
    """The DLRM paper's Criteo Kaggle model (dot interaction, D=16).

    Source: facebookresearch/dlrm bench/dlrm_s_criteo_kaggle.sh: ``--arch-sparse-feature-size=16
    --arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1``.
    """
    return ModelConfig(name="dlrm-criteo-kaggle", num_dense=CRITEO_NUM_DENSE, table_rows=KAGGLE_TABLE_ROWS,
                       embedding_dim=16, multi_hot=(1,) * len(KAGGLE_TABLE_ROWS), bottom_mlp=(512, 256, 64, 16),
                       top_mlp=(512, 256, 1), interaction="dot")


PRESETS: dict[str, Callable[[], ModelConfig]] = {
    "mlperf-dcnv2": mlperf_dcnv2,
    "dcnv2-small": dcnv2_small,
    "dlrm-criteo-kaggle": dlrm_criteo_kaggle,
}


def preset(name: str) -> ModelConfig:
    """The preset called ``name``; the error lists the known ones."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None
