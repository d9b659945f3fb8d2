"""Export: files, dtype, tokenizer, refusal to overwrite."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

import flodl_hf as fh
from flodl_core import ConfigError


def test_export_files_dtype_and_overwrite(
    tiny_models: dict, tokenizer_file: Path, tmp_path: Path
) -> None:
    folder, _ = tiny_models["distilbert", "mlm"]
    model = fh.AutoModelForMaskedLM.from_pretrained(folder, dtype=torch.bfloat16)
    model.with_tokenizer(fh.HfTokenizer.from_file(tokenizer_file))
    out = fh.export(model, tmp_path / "x")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DistilBertForMaskedLM"] and cfg["dtype"] == "bfloat16"
    assert cfg["dim"] == 32 and "hidden_size" not in cfg
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("vocab_projector.bias").dtype == torch.bfloat16
        assert f.metadata() == {"format": "pt"}
    assert "vocab_projector.weight" not in keys  # tied to the word embeddings
    again = fh.AutoModelForMaskedLM.from_pretrained(out)
    assert again.dtype == torch.bfloat16 and again.tokenizer is not None
    for k, v in model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    with pytest.raises(ConfigError, match="overwrite=True"):
        fh.export(model, out)
    fh.export(model, out, overwrite=True)
    with pytest.raises(ConfigError, match="expects a flodl_hf model"):
        fh.export(torch.nn.Linear(2, 2), tmp_path / "y")  # type: ignore[arg-type]


def test_base_export_has_bare_keys(tiny_models: dict, tmp_path: Path) -> None:
    folder, _ = tiny_models["albert", "base"]
    out = fh.export(fh.AutoModel.from_pretrained(folder), tmp_path)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert "embeddings.word_embeddings.weight" in keys and not any(
        k.startswith("albert.") for k in keys
    )


def test_exported_files_get_the_umask_mode(
    tiny_models: dict, tokenizer_file: Path, tmp_path: Path
) -> None:
    folder, _ = tiny_models["distilbert", "mlm"]
    model = fh.AutoModelForMaskedLM.from_pretrained(folder)
    model.with_tokenizer(fh.HfTokenizer.from_file(tokenizer_file))
    old = os.umask(0o027)
    try:
        out = fh.export(model, tmp_path / "x")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    # 0o666 & ~0o027, as for any new file (not the 0o600 of a mkstemp temp file)
    assert modes == {"config.json": 0o640, "model.safetensors": 0o640, "tokenizer.json": 0o640}


def test_a_bad_tokenizer_is_refused_before_anything_is_written(
    tokenizer_file: Path, tmp_path: Path
) -> None:
    from tokenizers import Tokenizer

    tiny = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2}
    model = fh.AutoModelForSequenceClassification.from_config(tiny)
    raw = Tokenizer.from_file(str(tokenizer_file))
    with pytest.raises(
        ConfigError, match=r"tokenizer must be an HfTokenizer .* HfTokenizer\(tok\)"
    ):
        fh.export(model, tmp_path / "out", tokenizer=raw)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()  # no half export left to block the next try
