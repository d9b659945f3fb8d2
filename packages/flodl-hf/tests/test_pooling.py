"""Sentence pooling against hand-computed numbers, and ``encode`` against the model run one
text at a time: no ``transformers`` needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import flodl_hf as fh
from flodl_core import ConfigError

TINY = {
    "model_type": "bert",
    "vocab_size": 100,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 12,
    "max_position_embeddings": 32,
}

# Row 0: three tokens. Row 1: two tokens, every real value negative, and a padded position
# holding large values that no pooling may see.
HIDDEN = torch.tensor(
    [
        [[-1.0, 2.0], [-3.0, 4.0], [-5.0, 6.0]],
        [[-2.0, -8.0], [-4.0, -6.0], [50.0, 50.0]],
    ]
)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
EXPECTED = {
    "cls": [[-1.0, 2.0], [-2.0, -8.0]],
    "max": [[-1.0, 6.0], [-2.0, -6.0]],  # not 50 (padding), not 0 (a masked-out zero)
    "mean": [[-3.0, 4.0], [-3.0, -7.0]],  # row 1: divided by its 2 tokens, not by 3
    "mean_sqrt_len": [
        [-9.0 / math.sqrt(3), 12.0 / math.sqrt(3)],
        [-6.0 / math.sqrt(2), -14.0 / math.sqrt(2)],
    ],
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
@pytest.mark.parametrize("mask_dtype", [torch.long, torch.bool, torch.float32])
def test_each_mode_by_hand(mode: str, mask_dtype: torch.dtype) -> None:
    got = fh.Pooling((mode,))(HIDDEN, MASK.to(mask_dtype))
    assert torch.allclose(got, torch.tensor(EXPECTED[mode]), atol=1e-6, rtol=0), got


def test_padding_at_the_end_of_a_longer_batch_changes_nothing() -> None:
    wide = torch.cat([HIDDEN, torch.full((2, 2, 2), -100.0)], dim=1)  # two more padded steps
    mask = torch.cat([MASK, torch.zeros(2, 2, dtype=torch.long)], dim=1)
    for mode, want in EXPECTED.items():
        got = fh.Pooling((mode,))(wide, mask)
        assert torch.allclose(got, torch.tensor(want), atol=1e-6, rtol=0), mode


def test_modes_concatenate_in_sentence_transformers_order() -> None:
    flags = {
        "pooling_mode_mean_sqrt_len_tokens": True,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_cls_token": True,
        "pooling_mode_max_tokens": True,
    }
    pool = fh.Pooling.from_config(flags, "1_Pooling/config.json")
    assert pool.modes == ("cls", "max", "mean", "mean_sqrt_len")
    got = pool(HIDDEN, MASK)
    want = torch.cat([torch.tensor(EXPECTED[m]) for m in pool.modes], dim=-1)
    assert got.shape == (2, 8) and torch.allclose(got, want, atol=1e-6, rtol=0)


def test_encode_pools_each_text_as_if_alone(tokenizer_file: Path) -> None:
    torch.manual_seed(0)
    model = fh.AutoModel.from_config(TINY).eval()
    tok = fh.HfTokenizer.from_file(tokenizer_file)
    modes = ("cls", "max", "mean", "mean_sqrt_len")
    enc = fh.SentenceEncoder(model, tok, fh.Pooling(modes))
    texts = ["the cat sat on the mat", "a dog", "john lives in paris and mary works in berlin"]
    got = enc.encode(texts, batch_size=2)  # padded batches, sorted by length
    assert got.shape == (3, 4 * 8)
    for row, text in zip(got, texts, strict=True):
        ids = torch.tensor(tok.encode_ids([text]))  # (1, S): no padding at all
        with torch.no_grad():
            h = model(ids).last_hidden_state[0]  # (S, H)
        n = h.shape[0]
        want = torch.cat([h[0], h.max(0).values, h.mean(0), h.sum(0) / math.sqrt(n)])
        assert torch.allclose(row, want, atol=1e-5), text


def test_a_plain_folder_needs_a_pooling(tmp_path: Path, tokenizer_file: Path) -> None:
    folder = fh.export(fh.AutoModel.from_config(TINY), tmp_path / "plain")
    (folder / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    with pytest.raises(fh.PoolingRequiredError) as e:
        fh.SentenceEncoder.from_pretrained(folder)
    assert isinstance(e.value, ConfigError)  # what callers already catch
    assert e.value.source == str(folder) and "mean" in e.value.choices
    assert "no modules.json" in str(e.value) and "pooling='mean'" in str(e.value)
    enc = fh.SentenceEncoder.from_pretrained(folder, pooling=["max", "mean"])
    assert enc.pooling.modes == ("max", "mean") and enc.dimension == 16
    (folder / "modules.json").write_text(
        json.dumps([{"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"}])
    )
    with pytest.raises(fh.PoolingRequiredError, match=r"modules\.json without a .*Pooling module"):
        fh.SentenceEncoder.from_pretrained(folder)
