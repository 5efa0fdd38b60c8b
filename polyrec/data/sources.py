"""Open a data source from its command-line spec: ``synthetic``, ``criteo:PATH``, ``mlperf:PATH``, ``movielens:PATH``.
``mlperf:`` reads the DLRM reference's one-hot binary file, or MLPerf v3+ multi-hot days where the list names
``day_N_sparse_multi_hot.npz`` files."""

from __future__ import annotations

import errno
import numbers
from pathlib import Path

import torch

from polyrec.data.criteo import CriteoTSVSource
from polyrec.data.mlperf import MLPerfBinarySource, RecordSource
from polyrec.data.multihot import MULTI_HOT_SUFFIX, MultiHotRecords
from polyrec.data.movielens import MovieLensSource
from polyrec.data.prefetch import Prefetching
from polyrec.data.synthetic import DISTRIBUTIONS, SyntheticSource
from polyrec.data.types import BadRows, Source
from polyrec.models.config import ModelConfig

KINDS = ("synthetic", "criteo", "mlperf", "movielens")
#: Files of a directory named in the message that refuses it as ``criteo:DIR`` (``list_files``) or ``mlperf:DIR``
#: (``binary_path``).
CRITEO_EXAMPLE_FILES = 2


def parse_spec(spec: str) -> tuple[str, str]:
    """``"criteo:/a/b.tsv"`` -> ("criteo", "/a/b.tsv"); ``"synthetic"`` or ``"synthetic:uniform"`` too."""
    kind, _, arg = spec.partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown data {spec!r}; use one of: synthetic, criteo:PATH, mlperf:PATH, movielens:PATH")
    if kind != "synthetic" and not arg:
        raise ValueError(f"data {kind!r} needs a path: {kind}:PATH")
    if kind == "synthetic" and arg and arg not in DISTRIBUTIONS:
        raise ValueError(f"unknown data {spec!r}: synthetic data draws {' or '.join(DISTRIBUTIONS)} ids "
                         f"(synthetic:{'|'.join(DISTRIBUTIONS)}; plain synthetic: {DISTRIBUTIONS[0]})")
    return kind, arg


#: What plain ``synthetic`` draws (``synthetic:zipf``, the power law).
SYNTHETIC_DEFAULT = DISTRIBUTIONS[0]


def canonical_spec(spec: str) -> str:
    """``spec`` as one string per data: synthetic's default distribution named (``synthetic`` is
    ``synthetic:zipf``) and each file path absolute, resolved from the working directory. A resume compares the
    checkpoint's spec before any file is read: a path that is not there is made absolute too, not refused (the
    reader names what is missing)."""
    kind, arg = parse_spec(spec)
    if kind == "synthetic":
        return f"synthetic:{arg or SYNTHETIC_DEFAULT}"
    return f"{kind}:" + ",".join(str(data_path(part).resolve()) for part in spec_parts(arg))


def spec_parts(arg: str) -> list[str]:
    """The paths of a file spec's ``arg`` as its reader takes them: the whole of it where it names an existing path
    (one path holding a comma: the MLPerf binary reader reads it; ``listed_paths`` refuses it in a list), else its
    comma-separated parts."""
    return [arg] if names_a_path(arg) else arg.split(",")


def shared_files(spec: str, eval_spec: str | None) -> list[Path]:
    """The files ``eval_spec`` reads that ``spec`` reads too (resolved, links followed; missing files left to the
    reader to name), in ``eval_spec``'s order: held-out data that is training data measures how well the model
    remembers its rows, not how it does on new ones."""
    if not eval_spec:
        return []
    trained = set(_files(spec))
    return list(dict.fromkeys(path for path in _files(eval_spec) if path in trained))


def _files(spec: str) -> list[Path]:
    """The existing files a file spec names, resolved (none for synthetic data)."""
    kind, arg = parse_spec(spec)
    if kind == "synthetic" or not arg:
        return []
    return [data_path(part).resolve() for part in spec_parts(arg) if names_a_path(part)]


def names_a_path(arg: str) -> bool:
    """Whether ``arg`` names a file or directory; a name too long for the system names none (a long list of paths,
    looked up joined at its commas, raised "File name too long")."""
    try:
        return data_path(arg).exists()
    except OSError as err:
        if err.errno != errno.ENAMETOOLONG:
            raise
        return False


def data_path(arg: str) -> Path:
    """A data path with ``~`` expanded: the shell expands it only at the start of a word, not in ``criteo:~/x``."""
    return Path(arg).expanduser()


def listed_paths(kind: str, arg: str) -> list[Path]:
    """The files of ``KIND:PATH[,PATH...]``, ``~`` expanded in each."""
    parts = arg.split(",")
    if "" in parts:  # Path("") is the working directory: "path . is a directory" said nothing useful
        raise ValueError(f"{kind}:{arg}: an empty path in the comma-separated list")
    if not all(names_a_path(p) for p in parts):
        refuse_comma_in_path(kind, parts)
        spaced = next((p for p in parts if p != p.strip() and not names_a_path(p)), None)
        if spaced is not None:  # "file not found:  B" hid the space
            raise ValueError(f"{kind}: {spaced!r} starts or ends with a space: the comma-separated list takes none")
    return [data_path(p) for p in parts]


def refuse_comma_in_path(kind: str, parts: list[str]) -> None:
    """ValueError where consecutive ``parts`` of a list joined by their commas name a file or directory: a path
    holding a comma, which the list cut in two (it said "file not found" for the part before the comma)."""
    for first in range(len(parts)):
        for stop in range(first + 2, len(parts) + 1):
            joined = ",".join(parts[first:stop])
            if names_a_path(joined):
                raise ValueError(f"{data_path(joined)} holds a comma, which separates the paths of "
                                 f"{kind}:PATH[,PATH...]: link or move it to a path without one")


def criteo_paths(arg: str) -> list[Path]:
    """The files of ``criteo:PATH[,PATH...]``; a directory among them is refused with the comma-separated list of
    its files to give instead."""
    paths = listed_paths("criteo", arg)
    directory = next((p for p in paths if p.is_dir()), None)
    if directory is not None:
        raise FileNotFoundError(f"Criteo TSV path {directory} is a directory, not a file: {list_files(directory)}")
    return paths


def list_files(directory: Path) -> str:
    """How to give ``directory``'s files to ``criteo:`` (a list; the shell expands no wildcard inside it)."""
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
    example = ",".join(map(str, files[:CRITEO_EXAMPLE_FILES])) + ("" if len(files) <= CRITEO_EXAMPLE_FILES else ",...")
    return (f"list its files comma-separated, without spaces{f' (criteo:{example})' if files else ''}; the shell "
            f"expands no wildcard inside criteo:PATH, but criteo:$(ls -d {directory}/* | paste -sd, -) builds the list")


def check_counts(batch_size: int, row_cap: int | None) -> None:
    """``batch_size`` and ``row_cap`` (None: no cap) whole numbers of at least 1: below that each reader failed
    its own way (None from ``next_batch``, a division by zero, a torch reshape error, empty batches, tables of 0
    rows)."""
    for name, value, none_ok in (("batch_size", batch_size, False), ("row_cap", row_cap, True)):
        if value is None and none_ok:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a whole number of at least 1{' (or None)' if none_ok else ''}, "
                             f"got {value!r}")


def open_source(spec: str, config: ModelConfig, *, batch_size: int, seed: int, device: torch.device,
                skip_bad_rows: bool = False, eval_spec: str | None = None, num_eval_batches: int = 8,
                synthetic_pool: int = 0, shared_seed: int | None = None, rank: int = 0,
                world_size: int = 1, row_cap: int | None = None, prefetch: bool = False) -> Source:
    """The source named by ``spec``; ``eval_spec`` (same kind, file formats only) gives held-out data;
    ``synthetic_pool`` > 0 makes synthetic training batches repeat with that period (benchmarks); ``prefetch``
    reads a file source's (criteo, mlperf) next training batch on a background thread (``prefetch.Prefetching``;
    synthetic batches are made on the device and MovieLens is in memory: they are not wrapped).
    ``row_cap`` (``--row-cap``) caps MovieLens' user and item tables, whose sizes come from the file; the
    other sources follow ``config``'s table sizes, which the caller has capped already.

    On several ranks: ``seed`` is this rank's (its batch stream), ``shared_seed`` every rank's (the
    synthetic hidden model, the MovieLens train/test split; None: ``seed``, as in one process), and
    file sources give rank ``rank`` of ``world_size`` its share of the rows. Every rank reads the
    whole eval file."""
    kind, arg = parse_spec(spec)
    check_counts(batch_size, row_cap)
    if eval_spec and kind in ("synthetic", "movielens"):
        raise ValueError(f"eval data {eval_spec!r} is only for criteo and mlperf data: synthetic data has its own "
                         "eval stream and MovieLens its test split")
    if synthetic_pool and kind != "synthetic":
        raise ValueError(f"--synthetic-pool {synthetic_pool} repeats synthetic batches; {kind} data reads its "
                         "file: leave it out")
    bad = BadRows(skip=skip_bad_rows)
    if kind == "synthetic":
        return SyntheticSource(config, batch_size=batch_size, seed=seed, device=device,
                               distribution=arg or SYNTHETIC_DEFAULT, num_eval_batches=num_eval_batches,
                               pool=synthetic_pool, model_seed=shared_seed)
    if kind == "movielens":
        return MovieLensSource(data_path(arg), batch_size=batch_size, seed=seed, bad_rows=bad, split_seed=shared_seed,
                               row_cap=row_cap)
    eval_source = None
    if eval_spec:
        eval_kind, eval_arg = parse_spec(eval_spec)
        if eval_kind != kind:
            raise ValueError(f"eval data {eval_spec!r} must be the same kind as the training data ({kind})")
        eval_source = _open_file_source(kind, eval_arg, config, batch_size, BadRows(skip=skip_bad_rows))
    source = _open_file_source(kind, arg, config, batch_size, bad, eval_source=eval_source,
                               num_eval_batches=num_eval_batches, rank=rank, world_size=world_size)
    cuda = device.type == "cuda"
    return Prefetching(source, pin=cuda, device=device if cuda else None) if prefetch else source


def _open_file_source(kind: str, arg: str, config: ModelConfig, batch_size: int, bad: BadRows, *,
                      eval_source: Source | None = None, num_eval_batches: int = 0, rank: int = 0,
                      world_size: int = 1) -> Source:
    if kind == "criteo":
        return CriteoTSVSource(criteo_paths(arg), config, batch_size=batch_size, bad_rows=bad, eval_source=eval_source,
                               num_eval_batches=num_eval_batches, rank=rank, world_size=world_size)
    if any(part.endswith(MULTI_HOT_SUFFIX) for part in spec_parts(arg)):  # MLPerf v3+ multi-hot days
        return RecordSource(MultiHotRecords(listed_paths(kind, arg)), config, batch_size=batch_size, bad_rows=bad,
                            eval_source=eval_source, num_eval_batches=num_eval_batches, rank=rank,
                            world_size=world_size)
    return MLPerfBinarySource(binary_path(arg), config, batch_size=batch_size, bad_rows=bad, eval_source=eval_source,
                              num_eval_batches=num_eval_batches, rank=rank, world_size=world_size)


def binary_path(arg: str) -> Path:
    """The one file of ``mlperf:PATH`` that names no multi-hot day (the DLRM reference's binary records); a list
    of files, and a directory holding multi-hot days (refused with the list of its days to give instead), are
    refused saying what ``mlperf:`` reads: they were "file not found" and "a directory" alone."""
    if "," in arg and not names_a_path(arg):
        raise ValueError(f"mlperf:{arg}: mlperf:PATH reads one file of binary records (a list names multi-hot days, "
                         f"day_N{MULTI_HOT_SUFFIX}): join the files into one, e.g. cat A B > AB")
    path = data_path(arg)
    days = sorted(path.glob(f"*{MULTI_HOT_SUFFIX}"), key=lambda p: (len(p.name), p.name)) if path.is_dir() else []
    if days:
        shown = days[:CRITEO_EXAMPLE_FILES]
        example = ",".join(map(str, shown)) + ("" if len(days) == len(shown) else ",...")
        raise FileNotFoundError(f"MLPerf path {path} is a directory, not a file: it holds {len(days)} multi-hot days; "
                                f"list them comma-separated (mlperf:{example})")
    return path
