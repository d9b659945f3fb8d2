"""Bad-input paths not covered next to their feature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models

import flodl_hf as fh
from flodl_core import CheckpointError, ConfigError, FetchError, ShapeError

TINY = {
    "model_type": "bert",
    "vocab_size": 40,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 8,
    "max_position_embeddings": 16,
}


def test_folder_without_weights(tmp_path: Path) -> None:
    fh.HfConfig.from_dict(TINY).save(tmp_path / "config.json")
    with pytest.raises(FetchError, match=r"has no weights: tried model\.safetensors"):
        fh.AutoModel.from_pretrained(tmp_path)


def test_hub_failure_is_a_fetch_error(monkeypatch: Any) -> None:
    import huggingface_hub

    def boom(*args: Any, **kwargs: Any) -> str:
        raise ConnectionError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", boom)
    with pytest.raises(FetchError, match="ConnectionError: network unreachable"):
        fh.AutoConfig.from_pretrained("owner/name")


def test_model_input_errors() -> None:
    model = fh.AutoModel.from_config(TINY)
    with pytest.raises(ShapeError, match="integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ShapeError, match="sequence too long: 17 tokens"):
        model(torch.ones(1, 17, dtype=torch.long))
    with pytest.raises(ConfigError, match="unknown task 'x'"):
        fh.models.build(fh.HfConfig.from_dict(TINY), "x")
    with pytest.raises(ConfigError, match="num_labels must be a positive"):
        fh.HfConfig.from_dict(TINY).with_labels(0)


def test_tokenizer_without_mask_token() -> None:
    tok = fh.HfTokenizer(Tokenizer(models.WordLevel({"[PAD]": 0, "a": 1}, unk_token="a")))
    with pytest.raises(ConfigError, match="no mask token"):
        _ = tok.mask_token


def test_answer_needs_context_tokens(monkeypatch: Any) -> None:
    vocab = {"[PAD]": 0, "[UNK]": 1, "who": 2, "john": 3}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    from tokenizers import pre_tokenizers

    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    qa = fh.AutoModelForQuestionAnswering.from_config(TINY, tokenizer=fh.HfTokenizer(raw))
    enc = qa.tokenizer.encode_pairs([("who", "john")])
    enc.sequence_ids[:] = 0  # as if truncation had removed the whole context
    monkeypatch.setattr(qa.tokenizer, "encode_pairs", lambda pairs: enc)
    with pytest.raises(ConfigError, match="no context tokens"):
        qa.answer("who", "john")


def test_unsupported_model_type_names_the_supported_ones(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "n_embd": 8}')
    with pytest.raises(ConfigError) as e:
        fh.AutoModel.from_pretrained(tmp_path)
    assert "model_type 'gpt2' is not supported" in str(e.value)
    assert all(t in str(e.value) for t in fh.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize(
    ("family", "dropped"),
    [
        ("mpnet", "mpnet.encoder.relative_attention_bias.weight"),
        ("electra", "electra.embeddings_project.weight"),
        ("modernbert", "model.layers.1.attn_norm.weight"),
    ],
)
def test_missing_family_keys_are_listed_and_nothing_loads(
    family: str, dropped: str, tiny_models: dict, tmp_path: Path
) -> None:
    from safetensors.torch import load_file, save_file

    folder, _ = tiny_models[family, "tokcls"]
    state = load_file(str(folder / "model.safetensors"))
    del state[dropped]
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_bytes((folder / "config.json").read_bytes())
    with pytest.raises(CheckpointError, match=r"1 missing from the checkpoint:\n  " + dropped):
        fh.AutoModelForTokenClassification.from_pretrained(tmp_path)
