"""Architectural variants beyond the matrix's configs: DeBERTa-v2 style attention, ALBERT
shared groups, untied decoders, and the log buckets against transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import flodl_hf as fh
from flodl_core import ConfigError
from flodl_hf.models._deberta_v2 import log_bucket_position

AUTO = {
    "base": fh.AutoModel,
    "mlm": fh.AutoModelForMaskedLM,
    "seqcls": fh.AutoModelForSequenceClassification,
}


def _check(
    hf_saver: Any, batch_for: Any, tmp_path: Path, family: str, task: str, **cfg: Any
) -> None:
    hf_model = hf_saver(family, task, tmp_path, seed=3, **cfg)
    batch = batch_for(hf_model.config, seed=1)
    ours = AUTO[task].from_pretrained(tmp_path)
    with torch.no_grad():
        ref = hf_model(**batch)
        got = ours(**batch)
    ref_t = ref.last_hidden_state if task == "base" else ref.logits
    got_t = got.last_hidden_state if task == "base" else got
    assert (ref_t - got_t).abs().max() <= 1e-5


V2_STYLE = {
    "share_att_key": False,
    "pos_att_type": ["c2p"],
    "position_biased_input": True,
    "type_vocab_size": 2,
    "position_buckets": -1,
    "max_relative_positions": 6,
    "norm_rel_ebd": "none",
    "legacy": False,
}


def test_deberta_v2_style(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    """Separate position projections, c2p only, absolute positions, token types, no buckets,
    and a factorised embedding with ``embed_proj``."""
    _check(hf_saver, batch_for, tmp_path, "deberta-v2", "base", embedding_size=24, **V2_STYLE)


def test_deberta_non_legacy_mlm(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    """The MLM head that projects onto the embedding table itself (``legacy=False``)."""
    _check(hf_saver, batch_for, tmp_path, "deberta-v2", "mlm", **V2_STYLE)


def test_deberta_without_relative_attention(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    _check(
        hf_saver,
        batch_for,
        tmp_path,
        "deberta-v2",
        "seqcls",
        relative_attention=False,
        pos_att_type=None,
        position_biased_input=True,
    )


def test_albert_groups(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    _check(
        hf_saver,
        batch_for,
        tmp_path,
        "albert",
        "base",
        num_hidden_layers=4,
        num_hidden_groups=2,
        inner_group_num=2,
    )


def test_untied_decoder(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    _check(hf_saver, batch_for, tmp_path, "roberta", "mlm", tie_word_embeddings=False)
    model = fh.AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert model.lm_head.decoder.weight is not model.roberta.embeddings.word_embeddings.weight
    assert "lm_head.decoder.weight" in model.hf_state_dict()


def test_log_buckets_match_transformers(transformers: Any) -> None:
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rel = torch.arange(300)[:, None] - torch.arange(300)[None, :]
    assert torch.equal(log_bucket_position(rel, 256, 512), make_log_bucket_position(rel, 256, 512))


def test_conv_layer_is_refused(tmp_path: Path) -> None:
    cfg = fh.HfConfig.from_dict(
        {
            "model_type": "deberta-v2",
            "hidden_size": 8,
            "num_attention_heads": 2,
            "num_hidden_layers": 1,
            "intermediate_size": 8,
            "vocab_size": 10,
            "conv_kernel_size": 3,
        }
    )
    with pytest.raises(ConfigError, match="convolution layer"):
        fh.AutoModel.from_config(cfg)
