"""Text APIs and losses, checked against transformers on the same tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import flodl_hf as fh
from flodl_core import ConfigError, ShapeError

TEXTS = ["the film was great", "a terrible movie", "john lives in paris"]


def _load(auto: Any, tiny_models: dict, task: str, tokenizer_file: Path) -> tuple[Any, Any]:
    folder, hf_model = tiny_models["bert", task]
    model = auto.from_pretrained(folder, tokenizer=fh.HfTokenizer.from_file(tokenizer_file))
    return model, hf_model


def _hf_inputs(enc: fh.EncodedBatch) -> dict[str, torch.Tensor]:
    return {
        "input_ids": enc.input_ids,
        "attention_mask": enc.attention_mask,
        "token_type_ids": enc.token_type_ids,
    }


def test_predict_sequence(tiny_models: dict, tokenizer_file: Path) -> None:
    model, hf_model = _load(
        fh.AutoModelForSequenceClassification, tiny_models, "seqcls", tokenizer_file
    )
    model.train()
    preds = model.predict(TEXTS)
    assert model.training  # the caller's mode is restored
    with torch.no_grad():
        probs = hf_model(**_hf_inputs(model.tokenizer.encode(TEXTS))).logits.softmax(-1)
    for row, ref in zip(preds, probs, strict=True):
        assert [p for _, p in row] == sorted((p for _, p in row), reverse=True)
        for label, p in row:
            assert abs(p - float(ref[int(label.split("_")[1])])) < 1e-5


def test_predict_tokens(tiny_models: dict, tokenizer_file: Path) -> None:
    model, hf_model = _load(
        fh.AutoModelForTokenClassification, tiny_models, "tokcls", tokenizer_file
    )
    preds = model.predict(TEXTS)
    enc = model.tokenizer.encode(TEXTS)
    with torch.no_grad():
        best = hf_model(**_hf_inputs(enc)).logits.softmax(-1).max(-1)
    for b, row in enumerate(preds):
        assert [t.token for t in row] == enc.tokens[b]
        assert [t.attends for t in row] == enc.attention_mask[b].bool().tolist()
        for t, token in enumerate(row):
            assert token.label == f"LABEL_{int(best.indices[b, t])}"
            assert abs(token.score - float(best.values[b, t])) < 1e-5
    assert preds[2][1].token == "john" and (preds[2][1].start, preds[2][1].end) == (0, 4)


def test_answer_maximises_start_plus_end(tiny_models: dict, tokenizer_file: Path) -> None:
    model, _ = _load(fh.AutoModelForQuestionAnswering, tiny_models, "qa", tokenizer_file)
    question, context = "where does john live", "john lives in paris and mary works in berlin"
    ans = model.answer(question, context)
    assert ans.text == context[ans.start : ans.end] and ans.text
    enc = model.tokenizer.encode_pairs([(question, context)])
    with torch.no_grad():
        out = model.forward_encoded(enc)
    ps, pe = out.start_logits.softmax(-1)[0], out.end_logits.softmax(-1)[0]
    ctx = [i for i, s in enumerate(enc.sequence_ids[0].tolist()) if s == 1]
    best = max((float(ps[i] + pe[j]), i, j) for i in ctx for j in ctx if i <= j)
    assert abs(ans.score - best[0] / 2) < 1e-6
    assert (ans.start, ans.end) == (enc.offsets[0][best[1]][0], enc.offsets[0][best[2]][1])
    assert model.answer_batch([(question, context)] * 2) == [ans, ans]


@pytest.mark.parametrize(
    ("auto", "task"),
    [
        (fh.AutoModelForSequenceClassification, "seqcls"),
        (fh.AutoModelForTokenClassification, "tokcls"),
        (fh.AutoModelForQuestionAnswering, "qa"),
    ],
)
def test_no_texts_no_predictions(
    auto: Any, task: str, tiny_models: dict, tokenizer_file: Path
) -> None:
    """An empty batch gives an empty answer, as ``SentenceEncoder.encode([])`` gives ``(0, D)``
    (it failed inside the tokenizer)."""
    model, _ = _load(auto, tiny_models, task, tokenizer_file)
    got = model.answer_batch([]) if task == "qa" else model.predict([])
    assert got == []


def test_fill_mask(tiny_models: dict, tokenizer_file: Path) -> None:
    model, hf_model = _load(fh.AutoModelForMaskedLM, tiny_models, "mlm", tokenizer_file)
    text = "paris is the [MASK] of [MASK]"
    got = model.fill_mask(text, top_k=3)
    assert len(got) == 2 and all(len(c) == 3 for c in got)
    enc = model.tokenizer.encode(text)
    with torch.no_grad():
        probs = hf_model(**_hf_inputs(enc)).logits.softmax(-1)[0]
    where = (enc.input_ids[0] == model.tokenizer.token_to_id("[MASK]")).nonzero().flatten()
    top = probs[int(where[0])].topk(3)
    assert [p for _, p in got[0]] == pytest.approx(top.values.tolist(), abs=1e-5)
    assert got[0][0][0] == model.tokenizer.decode([int(top.indices[0])])
    with pytest.raises(ConfigError, match="top_k must be a positive"):
        model.fill_mask(text, top_k=0)
    with pytest.raises(ConfigError, match=r"no \[MASK\]"):
        model.fill_mask("no mask here")


def test_losses_match_transformers_labels(tiny_models: dict, tokenizer_file: Path) -> None:
    tok = fh.HfTokenizer.from_file(tokenizer_file)
    enc = tok.encode(TEXTS)
    inputs = _hf_inputs(enc)
    cases = [
        ("seqcls", fh.AutoModelForSequenceClassification, torch.tensor([0, 2, 1]), "labels"),
        (
            "tokcls",
            fh.AutoModelForTokenClassification,
            torch.randint(0, 3, enc.input_ids.shape),
            "labels",
        ),
        (
            "mlm",
            fh.AutoModelForMaskedLM,
            torch.where(enc.attention_mask.bool(), enc.input_ids, -100),
            "labels",
        ),
    ]
    for task, auto, labels, key in cases:
        folder, hf_model = tiny_models["bert", task]
        model = auto.from_pretrained(folder)
        with torch.no_grad():
            ref = hf_model(**inputs, **{key: labels}).loss
            got = model.compute_loss(enc, labels)
        assert abs(float(got) - float(ref)) < 1e-5, task
    folder, hf_model = tiny_models["bert", "qa"]
    model = fh.AutoModelForQuestionAnswering.from_pretrained(folder)
    start, end = torch.tensor([1, 2, 99]), torch.tensor([2, 3, 99])  # 99: out of range, ignored
    with torch.no_grad():
        ref = hf_model(**inputs, start_positions=start, end_positions=end).loss
        got = model.compute_loss(enc, (start, end))
    assert abs(float(got) - float(ref)) < 1e-5
    with pytest.raises(ConfigError, match="start_positions, end_positions"):
        model.compute_loss(enc, start)


def test_fine_tuning_step_changes_only_unfrozen(tiny_models: dict, tokenizer_file: Path) -> None:
    folder, _ = tiny_models["bert", "seqcls"]
    model = fh.AutoModelForSequenceClassification.from_pretrained(folder)
    model.freeze("bert")
    emb = dict(model.named_parameters())["bert.embeddings.word_embeddings.weight"].clone()
    head = model.classifier.weight.clone()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model.train()
    loss = model.compute_loss(fh.HfTokenizer.from_file(tokenizer_file).encode(TEXTS), [0, 1, 2])
    loss.backward()
    opt.step()
    assert torch.equal(
        dict(model.named_parameters())["bert.embeddings.word_embeddings.weight"], emb
    )
    assert not torch.equal(model.classifier.weight, head)


def test_loss_and_input_errors(tiny_models: dict) -> None:
    logits = torch.zeros(2, 3)
    with pytest.raises(ShapeError, match="one class index per row"):
        fh.sequence_classification_loss(logits, torch.tensor([0, 1, 2]))
    with pytest.raises(ShapeError, match="shaped like the logits"):
        fh.sequence_classification_loss(logits, torch.zeros(2, 2))
    with pytest.raises(ConfigError, match="unknown problem_type"):
        fh.sequence_classification_loss(logits, torch.tensor([0, 1]), "ranking")
    with pytest.raises(ShapeError, match="one per token"):
        fh.token_classification_loss(torch.zeros(2, 4, 3), torch.zeros(2, 5, dtype=torch.long))
    assert float(fh.sequence_classification_loss(torch.zeros(2, 1), torch.ones(2))) == 1.0
    folder, _ = tiny_models["roberta", "base"]
    model = fh.AutoModel.from_pretrained(folder)
    with pytest.raises(ShapeError, match="sequence too long"):
        model(torch.full((1, 63), 5))  # RoBERTa positions start at pad+1: 63 + 1 > 63
    with pytest.raises(ShapeError, match=r"\(batch, seq\)"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ShapeError, match="attention_mask must have the shape"):
        model(torch.ones(2, 4, dtype=torch.long), torch.ones(2, 3))
    with pytest.raises(ConfigError, match="no task head"):
        model.compute_loss(None, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="has no tokenizer"):
        fh.AutoModelForSequenceClassification.from_pretrained(
            tiny_models["bert", "seqcls"][0]
        ).predict(["x"])


def test_label_names_instead_of_indices_are_named(tokenizer_file: Path) -> None:
    tiny = {"model_type": "bert", "vocab_size": 100, "hidden_size": 8, "num_attention_heads": 2}
    tok = fh.HfTokenizer.from_file(tokenizer_file)
    clf = fh.AutoModelForSequenceClassification.from_config(tiny, tokenizer=tok)
    with pytest.raises(ConfigError, match=r"labels must be numbers .* got \['pos', 'neg'\]"):
        clf.compute_loss(tok.encode(["good", "bad"]), ["pos", "neg"])
