"""HfModel's calling convention: inputs of the wrong kind are named."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import flodl_hf as fh
from flodl_core import ConfigError, ShapeError

TINY = {"model_type": "bert", "vocab_size": 100, "hidden_size": 8, "num_attention_heads": 2}


def test_forward_encoded_wants_a_tokenised_batch(tokenizer_file: Path) -> None:
    tok = fh.HfTokenizer.from_file(tokenizer_file)
    clf = fh.AutoModelForSequenceClassification.from_config(TINY, tokenizer=tok)
    with pytest.raises(ConfigError, match=r"expected an EncodedBatch .* got list"):
        clf.compute_loss(["a fine film"], [1])  # type: ignore[arg-type]


def test_masks_must_be_tensors() -> None:
    model = fh.AutoModel.from_config(TINY)
    with pytest.raises(
        ShapeError, match="attention_mask must be a tensor like input_ids, got list"
    ):
        model(torch.ones(1, 2, dtype=torch.long), attention_mask=[[1, 1]])  # type: ignore[arg-type]
