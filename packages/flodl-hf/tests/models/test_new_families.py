"""ELECTRA, MPNet and ModernBERT beyond the matrix's configs, against transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import flodl_hf as fh
from flodl_core import ConfigError
from flodl_hf.models import relative_position_bucket

AUTO = {
    "base": fh.AutoModel,
    "mlm": fh.AutoModelForMaskedLM,
    "seqcls": fh.AutoModelForSequenceClassification,
    "tokcls": fh.AutoModelForTokenClassification,
}


def _check(
    hf_saver: Any, batch_for: Any, tmp_path: Path, family: str, task: str, **cfg: Any
) -> Any:
    hf_model = hf_saver(family, task, tmp_path, seed=5, **cfg)
    batch = batch_for(hf_model.config, seed=2)
    ours = AUTO[task].from_pretrained(tmp_path)
    assert ours.load_report.ok and not ours.load_report.initialized
    with torch.no_grad():
        ref = hf_model(**batch)
        got = ours(**batch)
    ref_t = ref.last_hidden_state if task == "base" else ref.logits
    got_t = got.last_hidden_state if task == "base" else got
    assert (ref_t - got_t).abs().max() <= 1e-5
    return ours


def test_electra_without_projection_untied(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    ours = _check(
        hf_saver,
        batch_for,
        tmp_path,
        "electra",
        "mlm",
        embedding_size=32,
        tie_word_embeddings=False,
    )
    assert "electra.embeddings_project.weight" not in ours.state_dict()
    assert ours.generator_lm_head.weight is not ours.electra.embeddings.word_embeddings.weight


def test_electra_discriminator_loads_as_classifier(transformers: Any, tmp_path: Path) -> None:
    """A discriminator checkpoint (ElectraForPreTraining): backbone loaded, the replaced-token
    head reported unused, a fresh classifier."""
    torch.manual_seed(0)
    cfg = transformers.ElectraConfig(
        vocab_size=100,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    disc = transformers.ElectraForPreTraining(cfg)
    disc.save_pretrained(tmp_path)
    model = fh.AutoModelForSequenceClassification.from_pretrained(tmp_path, num_labels=2)
    rep = model.load_report
    assert {k.split(".")[0] for k in rep.unused} == {"discriminator_predictions"}
    assert {k.split(".")[0] for k in rep.initialized} == {"classifier"}


def test_mpnet_buckets_match_transformers(transformers: Any) -> None:
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    rel = torch.arange(300)[None, :] - torch.arange(300)[:, None]
    assert torch.equal(relative_position_bucket(rel), MPNetEncoder.relative_position_bucket(rel))


def test_mpnet_larger_bucket_table(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    """transformers reads only 32 buckets whatever the table size; so does flodl-hf."""
    _check(hf_saver, batch_for, tmp_path, "mpnet", "base", relative_attention_num_buckets=40)


def test_modernbert_mean_pooling_and_biases(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    _check(
        hf_saver,
        batch_for,
        tmp_path,
        "modernbert",
        "seqcls",
        classifier_pooling="mean",
        norm_bias=True,
        attention_bias=True,
        mlp_bias=True,
        classifier_bias=True,
        classifier_activation="silu",
    )


def test_modernbert_all_global_and_untied(hf_saver: Any, batch_for: Any, tmp_path: Path) -> None:
    kinds = ["full_attention"] * 3
    ours = _check(
        hf_saver,
        batch_for,
        tmp_path,
        "modernbert",
        "mlm",
        layer_types=kinds,
        tie_word_embeddings=False,
        decoder_bias=False,
    )
    assert ours.decoder.bias is None


def test_modernbert_reads_the_original_config_keys(tiny_models: dict, tmp_path: Path) -> None:
    """Released checkpoints spell the schedule as global_attn_every_n_layers and the rope bases as
    global_rope_theta / local_rope_theta (no layer_types, no rope_parameters)."""
    folder, hf_model = tiny_models["modernbert", "base"]
    raw = json.loads((folder / "config.json").read_text())
    rope = raw.pop("rope_parameters")
    raw.pop("layer_types")
    raw["global_attn_every_n_layers"] = 3
    raw["global_rope_theta"] = rope["full_attention"]["rope_theta"]
    raw["local_rope_theta"] = rope["sliding_attention"]["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    ours = fh.AutoModel.from_pretrained(tmp_path)
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        assert (ours(ids).last_hidden_state - hf_model(ids).last_hidden_state).abs().max() <= 1e-5
    types = [ours.model.layers.get_submodule(str(i)).attention_type for i in range(3)]
    assert types == ["full_attention", "sliding_attention", "sliding_attention"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"classifier_pooling": "max"}, "classifier_pooling 'max' is not supported"),
        ({"layer_types": ["full_attention"]}, "layer_types must list 2 entries"),
        (
            {"rope_parameters": {"full_attention": {"rope_type": "yarn"}}},
            "rope_type 'yarn' is not supported",
        ),
    ],
)
def test_modernbert_bad_settings(extra: dict, needle: str) -> None:
    base = {"model_type": "modernbert", "vocab_size": 10, "pad_token_id": 0, "hidden_size": 8}
    base.update(num_attention_heads=2, num_hidden_layers=2, intermediate_size=8)
    with pytest.raises(ConfigError, match=needle):
        fh.HfConfig.from_dict({**base, **extra})
