"""HfTokenizer against transformers' fast tokenizer over the same tokenizer.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models

from flodl_core import ConfigError, DataError
from flodl_hf import HfTokenizer

TEXTS = ["The cat sat on the mat", "Paris is the capital of France", "a dog"]


def test_ids_match_transformers(tokenizer_file: Path, transformers: Any) -> None:
    ref = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), pad_token="[PAD]"
    )
    tok = HfTokenizer.from_file(tokenizer_file)
    enc = tok.encode(TEXTS)
    want = ref(TEXTS, padding=True, return_tensors="pt", return_token_type_ids=True)
    assert torch.equal(enc.input_ids, want["input_ids"])
    assert torch.equal(enc.attention_mask, want["attention_mask"])
    assert torch.equal(enc.token_type_ids, want["token_type_ids"])
    pairs = [("what is the capital", "paris is the capital"), ("who", "john lives in berlin")]
    enc = tok.encode_pairs(pairs)
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    want = ref(firsts, seconds, padding=True, return_tensors="pt", return_token_type_ids=True)
    assert torch.equal(enc.input_ids, want["input_ids"])
    assert torch.equal(enc.token_type_ids, want["token_type_ids"])


def test_sequence_ids_offsets_and_padding(tokenizer_file: Path) -> None:
    tok = HfTokenizer.from_file(tokenizer_file)
    enc = tok.encode_pairs([("who", "john lives"), ("what", "paris")])
    assert enc.sequence_ids[0].tolist() == [-1, 0, -1, 1, 1, -1]
    assert enc.sequence_ids[1].tolist() == [-1, 0, -1, 1, -1, -1]
    assert enc.tokens[0][3] == "john" and enc.offsets[0][4] == (5, 10)
    assert enc.tokens[1][-1] == "[PAD]" and enc.attention_mask[1].tolist()[-1] == 0
    assert enc.input_ids.dtype == torch.long and len(enc) == 2


def test_truncation_only_when_asked(tokenizer_file: Path) -> None:
    tok = HfTokenizer.from_file(tokenizer_file)
    assert tok.encode(TEXTS[1]).input_ids.shape == (1, 8)
    assert tok.encode(TEXTS[1], max_length=5).input_ids.shape == (1, 5)
    assert tok.encode(TEXTS[1]).input_ids.shape == (1, 8)  # the switch did not stick


def test_save_roundtrip_and_vocab(tokenizer_file: Path, tmp_path: Path) -> None:
    tok = HfTokenizer.from_file(tokenizer_file)
    tok.save(tmp_path)
    again = HfTokenizer.from_file(tmp_path / "tokenizer.json")
    assert torch.equal(again.encode(TEXTS).input_ids, tok.encode(TEXTS).input_ids)
    assert tok.mask_token == "[MASK]" and tok.pad_token_id == 0
    assert tok.decode(tok.encode("the cat").input_ids[0].tolist()) == "the cat"


def test_bad_inputs(tokenizer_file: Path, tmp_path: Path) -> None:
    tok = HfTokenizer.from_file(tokenizer_file)
    with pytest.raises(ConfigError, match="non-empty list of strings"):
        tok.encode([])
    with pytest.raises(ConfigError, match="non-empty list of strings"):
        tok.encode([1, 2])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"\(str, str\) pairs"):
        tok.encode_pairs([("a",)])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="max_length must be a positive"):
        tok.encode("a", max_length=0)
    with pytest.raises(ConfigError, match="no tokenizer file"):
        HfTokenizer.from_file(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(DataError, match=r"not a valid tokenizer\.json"):
        HfTokenizer.from_file(tmp_path)
    with pytest.raises(ConfigError, match="no padding configured"):
        HfTokenizer(Tokenizer(models.WordLevel({"a": 0}, unk_token="a")))


def test_texts_of_the_wrong_kind_are_named(tokenizer_file: Path) -> None:
    tok = HfTokenizer.from_file(tokenizer_file)
    with pytest.raises(ConfigError, match="texts must be a string or a non-empty list"):
        tok.encode(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"got a NoneType at texts\[1\]"):
        tok.encode(["a", None])  # type: ignore[list-item]
    assert tok.encode_ids("the cat") == tok.encode_ids(["the cat"])  # one text, not 7 letters
    with pytest.raises(ConfigError, match=r"use HfTokenizer\.from_file\(path\)"):
        HfTokenizer(str(tokenizer_file))  # type: ignore[arg-type]
