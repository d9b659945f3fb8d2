"""HfConfig: reading each family's config.json, validation errors, writing back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flodl_core import ConfigError
from flodl_hf import SUPPORTED_MODEL_TYPES, AutoConfig, HfConfig


def test_distilbert_names_are_normalised_and_written_back() -> None:
    raw = {
        "model_type": "distilbert",
        "dim": 64,
        "n_layers": 3,
        "n_heads": 4,
        "hidden_dim": 99,
        "activation": "relu",
        "vocab_size": 50,
    }
    cfg = HfConfig.from_dict(raw)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (64, 3, 4)
    assert (cfg.intermediate_size, cfg.hidden_act, cfg.type_vocab_size) == (99, "relu", 0)
    out = cfg.to_dict(["DistilBertModel"])
    assert out["dim"] == 64 and out["n_layers"] == 3 and out["activation"] == "relu"
    assert "hidden_size" not in out and out["architectures"] == ["DistilBertModel"]


def test_family_defaults_and_labels() -> None:
    cfg = HfConfig.from_dict({"model_type": "roberta", "id2label": {"0": "neg", "1": "pos"}})
    assert cfg.pad_token_id == 1 and cfg.vocab_size == 50265
    assert cfg.labels == ["neg", "pos"] and cfg.num_labels == 2
    deb = HfConfig.from_dict({"model_type": "deberta-v2", "pos_att_type": "p2c|c2p"})
    assert deb.pos_att_type == ("p2c", "c2p") and deb.layer_norm_eps == 1e-7
    three = cfg.with_labels(3)
    assert three.labels == ["LABEL_0", "LABEL_1", "LABEL_2"] and cfg.num_labels == 2
    d = three.to_dict()
    assert d["id2label"] == {"0": "LABEL_0", "1": "LABEL_1", "2": "LABEL_2"}
    assert d["label2id"]["LABEL_2"] == 2


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (
            {"model_type": "gpt2"},
            "'gpt2' is not supported; supported model types: albert, bert, deberta-v2, "
            "distilbert, electra, modernbert, mpnet, roberta, xlm-roberta",
        ),
        ({"hidden_size": 8}, "no string 'model_type'"),
        ({"model_type": "bert", "hidden_size": 30, "num_attention_heads": 4}, "multiple of"),
        ({"model_type": "bert", "num_hidden_layers": 0}, "num_hidden_layers must be a positive"),
        ({"model_type": "bert", "hidden_act": "wiggle"}, "hidden_act 'wiggle' is not supported"),
        ({"model_type": "deberta-v2", "pos_att_type": ["c2p", "p2p"]}, "unknown entries ['p2p']"),
        ({"model_type": "bert", "id2label": {"0": "a", "2": "b"}}, "id2label must map 0..n-1"),
        ({"model_type": "bert", "pad_token_id": 99, "vocab_size": 10}, "pad_token_id 99"),
        ({"model_type": "albert", "num_hidden_layers": 3, "num_hidden_groups": 2}, "multiple of"),
        ({"model_type": "bert", "num_labels": 0}, "num_labels must be a positive"),
    ],
)
def test_bad_configs_are_named(data: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        HfConfig.from_dict(data)
    assert needle in str(e.value)


def test_supported_types() -> None:
    assert SUPPORTED_MODEL_TYPES == (
        "albert",
        "bert",
        "deberta-v2",
        "distilbert",
        "electra",
        "modernbert",
        "mpnet",
        "roberta",
        "xlm-roberta",
    )


def test_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no config\.json"):
        HfConfig.from_file(tmp_path)
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not valid JSON"):
        AutoConfig.from_pretrained(tmp_path)
    cfg = HfConfig.from_dict({"model_type": "bert", "hidden_size": 16, "num_attention_heads": 2})
    cfg.save(tmp_path / "config.json", ["BertModel"])
    again = HfConfig.from_file(tmp_path)
    assert again.hidden_size == 16 and json.loads((tmp_path / "config.json").read_text())[
        "architectures"
    ] == ["BertModel"]
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left
    with pytest.raises(ConfigError, match="num_labels=2 disagrees"):
        cfg.with_labels(2, {0: "a", 1: "b", 2: "c"})


def test_config_values_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    tiny = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2}
    with pytest.raises(ConfigError, match="config pad_token_id must be an integer token id"):
        HfConfig.from_dict({**tiny, "pad_token_id": "0"})
    with pytest.raises(ConfigError, match="config type_vocab_size must be an int"):
        HfConfig.from_dict({**tiny, "type_vocab_size": "2"})
    (tmp_path / "config.json").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match=r"config\.json is not valid JSON"):
        HfConfig.from_file(tmp_path)


def test_with_labels_wants_a_dict_of_indices() -> None:
    cfg = HfConfig.from_dict({"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2})
    with pytest.raises(ConfigError, match="id2label must be a dict of index -> name"):
        cfg.with_labels(id2label=["neg", "pos"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"id2label keys must be integer indices 0\.\.n-1"):
        cfg.with_labels(id2label={"neg": "negative"})  # type: ignore[dict-item]
