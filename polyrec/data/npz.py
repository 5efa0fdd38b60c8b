"""NumPy arrays mapped from disk in place: an ``.npy`` file, or a member of an uncompressed ``.npz``.

An .npy file is a magic string with a format version, a header (dtype, order, shape) and the raw array
(NumPy's format spec, ``numpy.lib.format``). An .npz is a zip of .npy members; ``np.savez`` stores them
uncompressed, so a member's bytes stand in the zip as they would in an .npy file, after the member's local file
header: 30 fixed bytes, then its name and its extra field (PKWARE's APPNOTE.TXT, section 4.3.7). A mapped array
costs no memory until its rows are read (``np.load`` reads an .npz member whole).
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from polyrec.data.types import DataError

#: A zip member's local file header (APPNOTE.TXT 4.3.7): its signature, 22 bytes not needed here (versions, flags,
#: method, time, CRC and sizes, which the central directory gives too), the name's and the extra field's lengths.
LOCAL_HEADER = struct.Struct("<4s22xHH")
LOCAL_HEADER_SIGNATURE = b"PK\x03\x04"  # APPNOTE.TXT 4.3.7
NPY_MAGIC = np.lib.format.MAGIC_PREFIX  # an .npy file's first bytes, b"\x93NUMPY"
#: .npy format versions whose headers ``numpy.lib.format`` reads publicly; ``np.save`` writes 3.0 only for
#: field names beyond latin-1 (numpy.lib.format), which no numeric array has.
NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def array_error(path: Path, member: str | None, text: str) -> DataError:
    """A DataError naming the file, and the .npz member where there is one."""
    return DataError(str(path), 0, f"member {member}: {text}" if member else text)


@dataclass(frozen=True, slots=True)
class NpyArray:
    """Where an array lies in a file, from its .npy header."""

    path: Path  # the .npy file, or the .npz that holds it
    member: str | None  # the .npz member ("3.npy"), or None for an .npy file
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int  # bytes before the array's first in ``path``

    def problem(self, text: str) -> DataError:
        return array_error(self.path, self.member, text)

    def map(self) -> np.ndarray:
        """The array, memory-mapped read-only; an empty one (a day of no rows) is made, not mapped: np.memmap of 0
        bytes, before numpy's gh-27723 fix, mapped the rest of the file, and failed where that was nothing (the
        array's offset a multiple of the page size, at the file's end)."""
        order = "F" if self.fortran_order else "C"
        if 0 in self.shape:
            return np.empty(self.shape, dtype=self.dtype, order=order)
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=self.shape, order=order)


def npy_header(path: Path, offset: int, end: int, member: str | None = None) -> NpyArray:
    """The array whose .npy bytes start at ``offset`` of ``path`` and end before ``end``; DataError where they are
    no .npy array, or shorter than its header says."""
    with open(path, "rb") as f:
        f.seek(offset)
        try:
            version = np.lib.format.read_magic(f)
            if version not in NPY_HEADER_READERS:
                raise array_error(path, member, f".npy format version {version[0]}.{version[1]} is not read; "
                                                "save it again with np.save")
            shape, fortran_order, dtype = NPY_HEADER_READERS[version](f)
        except ValueError as err:  # no magic string, a header that is no dict of the three keys, object arrays
            raise array_error(path, member, f"not a NumPy .npy array: {err}") from None
        array = NpyArray(path=path, member=member, shape=shape, dtype=dtype, fortran_order=fortran_order,
                         offset=f.tell())
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if array.offset + nbytes > end:
        raise array.problem(f"truncated: its header says {dtype} {list(shape)} ({nbytes} bytes) but "
                            f"{max(end - array.offset, 0)} bytes follow it")
    return array


def npy_file(path: Path) -> NpyArray:
    """The array of the .npy file ``path``."""
    return npy_header(path, 0, path.stat().st_size)


def npz_members(path: Path) -> dict[str, NpyArray]:
    """The arrays of the .npz ``path`` by member name ("0.npy", ...); DataError where it is no zip or a member is
    compressed (``np.savez_compressed``: its bytes cannot be mapped)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except zipfile.BadZipFile as err:
        raise DataError(str(path), 0, not_a_zip(path, err)) from None
    with open(path, "rb") as f:
        return {info.filename: npy_header(path, *member_span(f, path, info), member=info.filename)
                for info in infos}


def not_a_zip(path: Path, err: zipfile.BadZipFile) -> str:
    """Why the file at ``path``, which zipfile refused with ``err``, is no .npz: a zip cut short (its members come
    first, the directory zipfile reads last), an .npy array, or another file."""
    with open(path, "rb") as f:
        head = f.read(len(NPY_MAGIC))
    if head.startswith(LOCAL_HEADER_SIGNATURE):
        return ("truncated: it starts as a zip, but the zip's directory at its end is missing (a copy or a write cut "
                "short?): copy or write it again")
    if head == NPY_MAGIC:
        return ("a NumPy .npy array, not an .npz (np.savez's zip of .npy arrays): a multi-hot day's ids are the "
                "day_N_sparse_multi_hot.npz np.savez writes, its dense values and labels the .npy files beside it")
    return f"not an .npz (np.savez's zip of .npy arrays): {err}"


def member_span(f: BinaryIO, path: Path, info: zipfile.ZipInfo) -> tuple[int, int]:
    """(first byte, the byte after the last) of the stored member ``info`` in the open zip ``f`` at ``path``."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise DataError(str(path), 0, f"member {info.filename} is compressed (np.savez_compressed): polyrec maps the "
                                      "arrays from disk, so save the day with np.savez (uncompressed)")
    f.seek(info.header_offset)
    head = f.read(LOCAL_HEADER.size)
    if not head.startswith(LOCAL_HEADER_SIGNATURE) or len(head) < LOCAL_HEADER.size:
        raise array_error(path, info.filename, f"no local file header at byte {info.header_offset}")
    _, name_bytes, extra_bytes = LOCAL_HEADER.unpack(head)
    start = info.header_offset + LOCAL_HEADER.size + name_bytes + extra_bytes
    return start, start + info.file_size
