"""Training data: synthetic Criteo-like batches, Criteo TSV / MLPerf binary and multi-hot readers, MovieLens-100k."""

from polyrec.data.prefetch import Prefetching
from polyrec.data.sources import open_source, parse_spec
from polyrec.data.types import BadRows, Batch, DataError, Source

__all__ = ["BadRows", "Batch", "DataError", "Prefetching", "Source", "open_source", "parse_spec"]
