"""The parity matrix: 9 families x 5 tasks loaded from ``transformers``' own safetensors, same
outputs at ``max_abs_diff <= 1e-5`` (padded batch included), and the export round-trip."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import flodl_hf as fh
from flodl_core import CheckpointError

TOL = 1e-5
AUTO = {
    "base": fh.AutoModel,
    "seqcls": fh.AutoModelForSequenceClassification,
    "tokcls": fh.AutoModelForTokenClassification,
    "qa": fh.AutoModelForQuestionAnswering,
    "mlm": fh.AutoModelForMaskedLM,
}


def _outputs(task: str, out: Any) -> dict[str, torch.Tensor]:
    """Comparable tensors of a flodl-hf or transformers output."""
    if task == "base":
        if isinstance(out, fh.EncoderOutput):
            res = {"hidden": out.last_hidden_state}
            if out.pooler_output is not None:
                res["pooled"] = out.pooler_output
            return res
        res = {"hidden": out.last_hidden_state}
        if getattr(out, "pooler_output", None) is not None:
            res["pooled"] = out.pooler_output
        return res
    if task == "qa":
        return {"start": out.start_logits, "end": out.end_logits}
    return {"logits": out if isinstance(out, torch.Tensor) else out.logits}


def _assert_close(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> None:
    assert ours.keys() == ref.keys()
    for k in ref:
        assert ours[k].shape == ref[k].shape, k
        diff = (ours[k] - ref[k]).abs().max().item()
        assert diff <= TOL, f"{k}: max_abs_diff {diff:.3g} > {TOL}"


def test_parity_and_export(
    family: str,
    task: str,
    tiny_models: dict,
    hf_auto: dict[str, Any],
    tmp_path: Any,
    batch_for: Any,
) -> None:
    folder, hf_model = tiny_models[family, task]
    batch = batch_for(hf_model.config)
    ours = AUTO[task].from_pretrained(folder)
    assert isinstance(ours, fh.HfModel) and not ours.training
    assert ours.load_report.ok and not ours.load_report.initialized
    with torch.no_grad():
        ref = _outputs(task, hf_model(**batch))
        got = _outputs(task, ours(**batch))
    _assert_close(got, ref)

    # Export round-trip: transformers loads it with nothing missing or unexpected.
    fh.export(ours, tmp_path / "out")
    cls = hf_auto[task]
    again, info = cls.from_pretrained(tmp_path / "out", output_loading_info=True)
    assert type(again).__name__ == ours.architecture
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    again.eval()
    with torch.no_grad():
        _assert_close(_outputs(task, again(**batch)), ref)


def test_graph_paths_follow_hf_names(tiny_models: dict) -> None:
    folder, _ = tiny_models["bert", "seqcls"]
    model = fh.AutoModelForSequenceClassification.from_pretrained(folder)
    names = dict(model.named_parameters())
    assert "bert.encoder.layer.1.attention.self.query.weight" in names
    layer = model.parameters_at("bert.encoder.layer.1")
    assert layer and all(
        any(p is q for q in names.values()) for p in layer
    )  # the tree addresses the model's own parameters
    model.freeze("bert.embeddings")
    assert model.is_frozen("bert.embeddings")
    assert not names["bert.embeddings.word_embeddings.weight"].requires_grad
    assert names["classifier.weight"].requires_grad
    model.thaw("bert.embeddings")
    assert names["bert.embeddings.word_embeddings.weight"].requires_grad


def test_mlm_decoder_is_tied_after_loading(tiny_models: dict) -> None:
    folder, _ = tiny_models["bert", "mlm"]
    model = fh.AutoModelForMaskedLM.from_pretrained(folder)
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert "cls.predictions.decoder.weight" not in model.hf_state_dict()


def test_base_checkpoint_gives_fresh_head(tiny_models: dict, batch_for: Any) -> None:
    """A backbone checkpoint loaded for classification: backbone loaded, head initialised."""
    folder, hf_base = tiny_models["roberta", "base"]
    model = fh.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=4)
    rep = model.load_report
    assert sorted(rep.initialized) == sorted(k for k in model.state_dict() if "classifier" in k)
    assert set(rep.unused) == {"pooler.dense.bias", "pooler.dense.weight"}  # file names
    assert model.classifier.out_proj.weight.shape == (4, 32)
    assert model.labels == ["LABEL_0", "LABEL_1", "LABEL_2", "LABEL_3"]
    batch = batch_for(hf_base.config)
    with torch.no_grad():
        hidden = model.graph.child_graph("roberta")(
            batch["input_ids"], **model.graph_inputs(**batch)
        )
        ref = hf_base(**batch).last_hidden_state
    assert (hidden - ref).abs().max() <= TOL


def test_task_checkpoint_loads_as_base(tiny_models: dict) -> None:
    """A task checkpoint loaded as a backbone: the head keys are unused, the pooler fresh."""
    folder, _ = tiny_models["bert", "tokcls"]
    model = fh.AutoModel.from_pretrained(folder)
    assert set(model.load_report.unused) == {"classifier.bias", "classifier.weight"}
    assert set(model.load_report.initialized) == {
        "bert.pooler.dense.bias",
        "bert.pooler.dense.weight",
    }


def test_head_of_other_label_count_is_refused(tiny_models: dict) -> None:
    folder, _ = tiny_models["bert", "seqcls"]
    with pytest.raises(CheckpointError) as e:
        fh.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=5)
    assert "classifier.weight" in str(e.value) and "(3, 32) vs (5, 32)" in str(e.value)


def test_from_config_matches_hf_init_statistics(tiny_models: dict) -> None:
    folder, _ = tiny_models["albert", "mlm"]
    cfg = fh.AutoConfig.from_pretrained(folder)
    model = fh.AutoModelForMaskedLM.from_config(cfg)
    assert model.training
    w = model.albert.embeddings.word_embeddings.weight
    assert abs(w.std().item() - cfg.initializer_range) < 0.005
    assert model.predictions.decoder.weight is w
    out = model(torch.randint(0, 100, (2, 7)))
    assert out.shape == (2, 7, 100)


def test_from_config_export_reload_without_transformers(family: str, tmp_path: Any) -> None:
    """Fresh models of every family and task run, export and reload to identical outputs."""
    base = {
        "model_type": family,
        "vocab_size": 50,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 20,
        "max_position_embeddings": 32,
        "embedding_size": 8 if family == "albert" else None,
        "relative_attention": family == "deberta-v2",
        "position_buckets": 4,
        "pad_token_id": 0 if family == "modernbert" else None,  # its default lies past 50
        "local_attention": 4 if family == "modernbert" else None,
    }
    if family == "distilbert":
        base = {
            "model_type": family,
            "vocab_size": 50,
            "dim": 16,
            "n_layers": 2,
            "n_heads": 2,
            "hidden_dim": 20,
            "max_position_embeddings": 32,
        }
    ids = torch.randint(3, 50, (2, 6))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    for task, auto in AUTO.items():
        model = auto.from_config({k: v for k, v in base.items() if v is not None}, num_labels=3)
        model.eval()
        with torch.no_grad():
            first = _outputs(task, model(ids, mask))
        out = fh.export(model, tmp_path / task)
        again = auto.from_pretrained(out)
        assert again.load_report.ok and not again.load_report.initialized
        with torch.no_grad():
            _assert_close(_outputs(task, again(ids, mask)), first)
        shape = next(iter(first.values())).shape
        want = {
            "base": (2, 6, 16),
            "seqcls": (2, 3),
            "tokcls": (2, 6, 3),
            "qa": (2, 6),
            "mlm": (2, 6, 50),
        }[task]
        assert tuple(shape) == want, task


def test_subgraph_checkpoint_moves_an_encoder(tiny_models: dict, tmp_path: Any) -> None:
    """The fine-tuned encoder of one model loads into another by graph path (.fdl format)."""
    folder, _ = tiny_models["bert", "tokcls"]
    a = fh.AutoModelForTokenClassification.from_pretrained(folder)
    b = fh.AutoModelForTokenClassification.from_pretrained(folder)
    with torch.no_grad():
        for p in a.parameters_at("bert.encoder"):
            p.add_(1.0)
    a.graph.subgraph("bert.encoder").save_checkpoint(tmp_path / "encoder.fdl")
    b.load_subgraph_checkpoint("bert.encoder", tmp_path / "encoder.fdl")
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa if k.startswith("bert.encoder."))
    assert not torch.equal(
        sa["bert.encoder.layer.0.output.dense.weight"],
        fh.AutoModelForTokenClassification.from_pretrained(folder).state_dict()[
            "bert.encoder.layer.0.output.dense.weight"
        ],
    )


def test_tokenizer_argument_of_the_wrong_kind_is_refused(tmp_path: Any) -> None:
    from flodl_core import ConfigError

    tiny = {"model_type": "bert", "hidden_size": 8, "num_attention_heads": 2}
    folder = fh.export(fh.AutoModel.from_config(tiny), tmp_path / "m")
    with pytest.raises(ConfigError, match="tokenizer must be True, False or an HfTokenizer"):
        fh.AutoModel.from_pretrained(folder, tokenizer=str(folder / "tokenizer.json"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tokenizer must be an HfTokenizer or None, got str"):
        fh.AutoModel.from_config(tiny, tokenizer="tokenizer.json")  # type: ignore[arg-type]
