"""Each family's position ids, checked against the rule that family uses (no ``transformers``):

- BERT, ALBERT, ELECTRA, DistilBERT, DeBERTa-v2 with absolute positions: ``0 .. S-1`` on every
  row, padding included;
- RoBERTa, XLM-RoBERTa (fairseq): ``pad + 1 + (non-pad tokens before this one)`` for a token,
  ``pad`` for a padding id, with ``pad = config.pad_token_id``; MPNet the same with ``pad = 1``
  whatever the config says;
- ModernBERT: rotary angles of ``0 .. S-1``; DeBERTa-v2 and MPNet relative distances, bucketed.

The position ids are read where the model uses them (the position table, the rotary angles), so
a model that computes them right but passes something else along fails too.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import flodl_hf as fh
from flodl_core import ShapeError
from flodl_hf.models import _modernbert, relative_position_bucket
from flodl_hf.models._deberta_v2 import log_bucket_position, relative_positions

BASE = {
    "vocab_size": 50,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 20,
    "max_position_embeddings": 32,
}
# model_type -> (config overrides, the rule: "arange" or the padding id fairseq counts from)
FAMILIES: dict[str, tuple[dict[str, Any], str | int]] = {
    "bert": ({"pad_token_id": 0}, "arange"),
    "albert": ({"pad_token_id": 0, "embedding_size": 8}, "arange"),
    "electra": ({"pad_token_id": 0, "embedding_size": 8}, "arange"),
    "distilbert": ({}, "arange"),
    "deberta-v2": ({"position_biased_input": True, "relative_attention": True}, "arange"),
    "roberta": ({"pad_token_id": 3}, 3),  # not the usual 1: the config's id is the one counted
    "xlm-roberta": ({"pad_token_id": 2}, 2),
    "mpnet": ({"pad_token_id": 0}, 1),  # MPNet counts from 1 whatever the config says
}
PREFIX = {
    "bert": "bert",
    "albert": "albert",
    "electra": "electra",
    "distilbert": "distilbert",
    "deberta-v2": "deberta",
    "roberta": "roberta",
    "xlm-roberta": "roberta",
    "mpnet": "mpnet",
}


def _config(model_type: str, **overrides: Any) -> dict[str, Any]:
    if model_type == "distilbert":
        cfg = {"dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 20}
        base = {k: v for k, v in BASE.items() if k in ("vocab_size", "max_position_embeddings")}
        return {"model_type": model_type, **base, **cfg, **overrides}
    return {"model_type": model_type, **BASE, **overrides}


def _batch(pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows: no padding, right padding, and a padding id inside the text."""
    t = [11, 12, 13, 14, 15, 16]
    ids = torch.tensor(
        [
            t,
            [t[0], t[1], t[2], pad, pad, pad],
            [t[0], pad, t[1], t[2], pad, pad],
        ]
    )
    return ids, (ids != pad).long()


def _rule(ids: torch.Tensor, rule: str | int) -> list[list[int]]:
    """The expected position ids, counted token by token."""
    b, s = ids.shape
    if rule == "arange":
        return [list(range(s)) for _ in range(b)]
    out = []
    for row in ids.tolist():
        seen, pos = 0, []
        for tok in row:
            if tok == rule:
                pos.append(rule)
            else:
                seen += 1
                pos.append(rule + seen)
        out.append(pos)
    return out


def _seen_by_the_table(model: Any, prefix: str, *args: Any, **kw: Any) -> list[list[int]]:
    """The ids the position table is indexed with when ``model(*args, **kw)`` runs."""
    seen: list[torch.Tensor] = []
    table = model.get_submodule(f"{prefix}.embeddings.position_embeddings")
    handle = table.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].clone()))
    try:
        with torch.no_grad():
            model(*args, **kw)
    finally:
        handle.remove()
    assert len(seen) == 1
    return seen[0].tolist()


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_default_position_ids_follow_the_family_rule(model_type: str) -> None:
    overrides, rule = FAMILIES[model_type]
    model = fh.AutoModel.from_config(_config(model_type, **overrides)).eval()
    pad = 0 if rule == "arange" else rule
    ids, mask = _batch(int(pad))
    want = _rule(ids, rule)
    assert want[1][:4] == ([0, 1, 2, 3] if rule == "arange" else [pad + 1, pad + 2, pad + 3, pad])
    assert _seen_by_the_table(model, PREFIX[model_type], ids, mask) == want
    emb = model.get_submodule(f"{PREFIX[model_type]}.embeddings")
    if hasattr(emb, "default_position_ids"):  # the embeddings run on their own
        assert emb.default_position_ids(ids).tolist() == want
    given = torch.tensor([[5, 4, 3, 2, 1, 0]] * 3)
    got = _seen_by_the_table(model, PREFIX[model_type], ids, mask, position_ids=given)
    assert got == given.tolist()  # explicit position ids are used as given


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_longest_input_is_bounded_by_the_rule(model_type: str) -> None:
    overrides, rule = FAMILIES[model_type]
    model = fh.AutoModel.from_config(_config(model_type, **overrides)).eval()
    longest = 32 if rule == "arange" else 32 - int(rule) - 1  # its last position is 31
    with torch.no_grad():
        model(torch.full((1, longest), 7))
    with pytest.raises(ShapeError, match=f"sequence too long: {longest + 1} tokens"):
        model(torch.full((1, longest + 1), 7))


def test_deberta_without_absolute_positions_has_no_table_and_no_bound() -> None:
    cfg = _config("deberta-v2", position_biased_input=False, relative_attention=True)
    model = fh.AutoModel.from_config(cfg).eval()
    assert model.deberta.embeddings.position_embeddings is None
    ids, mask = _batch(0)
    with torch.no_grad():
        a = model(ids, mask).last_hidden_state
        b = model(ids, mask, position_ids=torch.tensor([[9, 3, 0, 1, 7, 2]] * 3)).last_hidden_state
        model(torch.full((1, 40), 7))  # longer than max_position_embeddings: nothing to index
    assert torch.equal(a, b)


def test_modernbert_rotary_angles_use_arange_positions(monkeypatch: Any) -> None:
    cfg = _config("modernbert", pad_token_id=0, local_attention=4)
    model = fh.AutoModel.from_config(cfg).eval()
    seen: list[torch.Tensor] = []
    real = _modernbert.rotary_cos_sin

    def record(position_ids: torch.Tensor, *args: Any) -> torch.Tensor:
        seen.append(position_ids.clone())
        return real(position_ids, *args)

    monkeypatch.setattr(_modernbert, "rotary_cos_sin", record)
    ids, mask = _batch(0)
    with torch.no_grad():
        model(ids, mask)
    assert seen and all(p.tolist() == _rule(ids, "arange") for p in seen)
    seen.clear()
    given = torch.tensor([[5, 4, 3, 2, 1, 0]] * 3)
    with torch.no_grad():
        model(ids, mask, position_ids=given)
    assert seen and all(p.tolist() == given.tolist() for p in seen)  # used as given
    seen.clear()
    with torch.no_grad():
        model(torch.full((1, 40), 7))  # rotary: no table, so no length bound
    assert seen[0].tolist() == [list(range(40))]


def test_deberta_relative_distances_by_hand() -> None:
    cfg = fh.HfConfig.from_dict(_config("deberta-v2", relative_attention=True))
    rel = relative_positions(4, cfg, torch.device("cpu"))
    assert rel.tolist() == [[[0, -1, -2, -3], [1, 0, -1, -2], [2, 1, 0, -1], [3, 2, 1, 0]]]
    # 8 buckets up to 64: exact within 4 either side, then ceil(log(|r|/4) / log(63/4) * 3) + 4.
    r = torch.tensor([0, 1, -3, 3, 4, -4, 5, 10, 17, -17, 63, -63, 100, -100])
    want = [0, 1, -3, 3, 4, -4, 5, 5, 6, -6, 7, -7, 8, -8]
    assert log_bucket_position(r, 8, 64).tolist() == want


def test_mpnet_relative_buckets_by_hand() -> None:
    # 32 buckets, half per direction (keys after the query: +16); exact below 8, then
    # 8 + int(log(|r|/8) / log(128/8) * 8), at most 15.
    r = torch.tensor([0, -3, 3, -7, 7, -8, 8, -20, 20, -127, -128, -200, 200])
    want = [0, 3, 19, 7, 23, 8, 24, 10, 26, 15, 15, 15, 31]
    assert relative_position_bucket(r).tolist() == want
