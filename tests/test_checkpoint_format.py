"""A file given as a checkpoint that torch.save did not write (text, another program's data) is named as such,
not by torch's unpickler internals ("KeyError: 101"); a damaged torch file keeps torch's reason."""

from __future__ import annotations

import re

import pytest
import torch

from polyrec.runtime.checkpoint import CHECKPOINT_NAME, load_checkpoint
from polyrec.runtime.sharded_checkpoint import _read_rank_file


@pytest.mark.parametrize("content, shown", [
    (b"hello, this is not a checkpoint\n", "it starts with b'hello, this is n'"),
    (b'{"step": 3}', "it starts with b'{\"step\": 3}'"),
    (b"", "it is empty"),
])
def test_a_file_torch_save_did_not_write_is_named_as_such(tmp_path, content, shown):
    (tmp_path / CHECKPOINT_NAME).write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / CHECKPOINT_NAME} is damaged or not a polyrec "
                                                   f"checkpoint (not a file written by torch.save: {shown})")):
        load_checkpoint(tmp_path)
    (tmp_path / "emb-rank0.pt").write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"emb-rank0.pt is damaged or not a polyrec shard file (not a file "
                                                   f"written by torch.save: {shown})")):
        _read_rank_file(tmp_path / "emb-rank0.pt")


@pytest.mark.parametrize("cut", [b"zip", b"pickle"])
def test_a_damaged_torch_file_keeps_torchs_reason(tmp_path, cut):
    path = tmp_path / CHECKPOINT_NAME
    torch.save({"format": 1, "w": torch.zeros(100)}, path, _use_new_zipfile_serialization=cut == b"zip")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match=r"is damaged or not a polyrec checkpoint \((?!not a file)\w+: ") as info:
        load_checkpoint(tmp_path)
    assert "torch.save" not in str(info.value)
