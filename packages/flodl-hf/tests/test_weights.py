"""Weight files: safetensors (dtype kept, shards), weights_only .bin, refusals."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from flodl_core import CheckpointError
from flodl_hf import read_weights


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_safetensors_keep_dtype_bit_exact(tmp_path: Path, dtype: torch.dtype) -> None:
    t = torch.randn(4, 5).to(dtype)
    save_file({"w": t}, str(tmp_path / "model.safetensors"))
    got = read_weights(tmp_path)["w"]
    assert got.dtype == dtype and torch.equal(got, t)


def test_shards(tmp_path: Path) -> None:
    save_file({"a": torch.ones(2)}, str(tmp_path / "model-1.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "model-2.safetensors"))
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    got = read_weights(tmp_path)
    assert set(got) == {"a", "b"}
    index["weight_map"]["c"] = "model-2.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="no shard holds"):
        read_weights(tmp_path)


def test_bin_through_weights_only(tmp_path: Path) -> None:
    torch.save({"w": torch.arange(3.0)}, tmp_path / "pytorch_model.bin")
    assert torch.equal(read_weights(tmp_path)["w"], torch.arange(3.0))


class Payload:
    def __reduce__(self) -> tuple:
        return (print, ("pickle code ran",))


def test_bin_with_code_is_refused(tmp_path: Path) -> None:
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"w": Payload()}, f, protocol=2)
    with pytest.raises(CheckpointError, match="weights_only"):
        read_weights(tmp_path / "pytorch_model.bin")


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"no weights in .*holds: notes.txt"):
        (tmp_path / "notes.txt").write_text("x")
        read_weights(tmp_path)
    (tmp_path / "w.npz").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="unsupported weight format"):
        read_weights(tmp_path / "w.npz")
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 5)
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        read_weights(tmp_path / "model.safetensors")
    torch.save([1, 2], tmp_path / "list.bin")
    with pytest.raises(CheckpointError, match="flat name -> tensor"):
        read_weights(tmp_path / "list.bin")
    with pytest.raises(CheckpointError, match="does not exist"):
        read_weights(tmp_path / "missing.safetensors")


@pytest.mark.parametrize(
    "shard",
    [
        "../outside.safetensors",
        "/abs/outside.safetensors",
        "sub/../../outside.safetensors",
        "..\\outside.safetensors",
        "C:outside.safetensors",
        "",
    ],
)
def test_shards_outside_the_folder_are_refused(tmp_path: Path, shard: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({"a": torch.ones(2)}, str(folder / "model-1.safetensors"))
    save_file({"b": torch.zeros(3)}, str(tmp_path / "outside.safetensors"))  # a readable file
    index = {"weight_map": {"a": "model-1.safetensors", "b": shard}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="shard files outside its model folder") as e:
        read_weights(folder)
    assert repr(shard) in str(e.value) and "nothing was loaded" in str(e.value)


def test_shards_in_a_subfolder_and_bad_maps(tmp_path: Path) -> None:
    (tmp_path / "parts").mkdir()
    save_file({"a": torch.ones(2)}, str(tmp_path / "parts" / "model-1.safetensors"))
    index = {"weight_map": {"a": "parts/model-1.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert set(read_weights(tmp_path)) == {"a"}  # inside the folder: allowed
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": 3}}')
    with pytest.raises(CheckpointError, match="weight_map must map each tensor name"):
        read_weights(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(CheckpointError, match="is not a safetensors shard index"):
        read_weights(tmp_path)
