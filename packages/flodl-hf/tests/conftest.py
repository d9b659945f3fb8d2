"""Shared fixtures: tiny random models saved by ``transformers`` (the parity reference, a test-only
dependency) and a tiny WordPiece tokenizer, each built once per session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

FAMILIES = (
    "bert",
    "roberta",
    "distilbert",
    "albert",
    "xlm-roberta",
    "deberta-v2",
    "electra",
    "mpnet",
    "modernbert",
)
TASKS = ("base", "seqcls", "tokcls", "qa", "mlm")
HF_AUTO = {
    "base": "AutoModel",
    "seqcls": "AutoModelForSequenceClassification",
    "tokcls": "AutoModelForTokenClassification",
    "qa": "AutoModelForQuestionAnswering",
    "mlm": "AutoModelForMaskedLM",
}
VOCAB = 100
WORDS = (
    "the",
    "a",
    "an",
    "is",
    "of",
    "in",
    "on",
    "to",
    "what",
    "where",
    "who",
    "film",
    "movie",
    "great",
    "good",
    "bad",
    "terrible",
    "cat",
    "dog",
    "sat",
    "mat",
    "paris",
    "london",
    "berlin",
    "france",
    "capital",
    "city",
    "john",
    "mary",
    "lives",
    "works",
    "at",
    "and",
    "was",
    "fine",
)


def tiny_hf_config(family: str, **overrides: Any) -> Any:
    """A small ``transformers`` config of ``family`` (hidden 32, 2 layers, 4 heads)."""
    import transformers as tf

    common = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 37,
        "max_position_embeddings": 64,
        "num_labels": 3,
    }
    if family == "bert":
        cfg = tf.BertConfig(**common)
    elif family == "roberta":
        cfg = tf.RobertaConfig(**common)
    elif family == "xlm-roberta":
        cfg = tf.XLMRobertaConfig(**common)
    elif family == "albert":
        cfg = tf.AlbertConfig(**common, embedding_size=16)
    elif family == "distilbert":
        cfg = tf.DistilBertConfig(
            vocab_size=VOCAB,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=37,
            max_position_embeddings=64,
            num_labels=3,
        )
    elif family == "electra":  # a narrower embedding table, bridged by embeddings_project
        cfg = tf.ElectraConfig(**common, embedding_size=16)
    elif family == "mpnet":
        cfg = tf.MPNetConfig(**common)
    elif family == "modernbert":
        # Three layers: global, local, local; a window of 2 either side, so that the 9-token
        # test batch has keys outside the window; special ids inside the tiny vocabulary.
        specials = {"pad_token_id": 0, "bos_token_id": 2, "cls_token_id": 2, "eos_token_id": 3}
        cfg = tf.ModernBertConfig(
            **{**common, "num_hidden_layers": 3},
            local_attention=4,
            sep_token_id=3,
            **specials,
        )
    else:  # DeBERTa-v3 style: shared keys, log buckets, normalised relative table
        cfg = tf.DebertaV2Config(
            **common,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_buckets=8,
            max_relative_positions=64,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            position_biased_input=False,
        )
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def save_hf(family: str, task: str, folder: Path, seed: int = 0, **overrides: Any) -> Any:
    """Build a seeded random ``transformers`` model, save it (safetensors) and return it."""
    import transformers as tf

    torch.manual_seed(seed)
    if task == "qa":
        overrides.setdefault("num_labels", 2)  # start and end
    model = getattr(tf, HF_AUTO[task]).from_config(tiny_hf_config(family, **overrides))
    # Random LayerNorms and biases too: a parity test must not pass on unit / zero defaults.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.1)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.fixture(scope="session")
def transformers() -> Any:
    return pytest.importorskip("transformers", reason="transformers is the parity reference")


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    """Each model family in turn: a test taking ``family`` runs once per family."""
    return request.param


@pytest.fixture(params=TASKS)
def task(request: pytest.FixtureRequest) -> str:
    """Each task head in turn: a test taking ``task`` runs once per task."""
    return request.param


@pytest.fixture(scope="session")
def hf_auto(transformers: Any) -> dict[str, Any]:
    """task -> the ``transformers`` Auto class that loads that task's checkpoints."""
    return {task: getattr(transformers, name) for task, name in HF_AUTO.items()}


@pytest.fixture(scope="session")
def tiny_models(
    transformers: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], tuple[Path, Any]]:
    """(family, task) -> (folder with model.safetensors + config.json, the HF model)."""
    root = tmp_path_factory.mktemp("tiny")
    out = {}
    for i, family in enumerate(FAMILIES):
        for j, task in enumerate(TASKS):
            folder = root / f"{family}-{task}"
            out[family, task] = (folder, save_hf(family, task, folder, seed=10 * i + j))
    return out


def make_tokenizer() -> Any:
    """A tiny lower-casing WordPiece ``tokenizers.Tokenizer`` with BERT's special tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*specials, *WORDS, "##s", "##ed", "##ing"])}
    assert len(vocab) <= VOCAB
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(specials)
    return tok


@pytest.fixture(scope="session")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    make_tokenizer().save(str(path))
    return path


def padded_batch(pad_id: int, type_vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Three rows of different lengths, padded with ``pad_id``; random token types if any."""
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 6, 3]
    ids = torch.full((3, 9), pad_id, dtype=torch.long)
    mask = torch.zeros((3, 9), dtype=torch.long)
    for r, n in enumerate(lengths):
        row = torch.randint(5, VOCAB, (n,), generator=g)
        row[row == pad_id] = 5
        ids[r, :n] = row
        mask[r, :n] = 1
    out = {"input_ids": ids, "attention_mask": mask}
    if type_vocab > 0:
        out["token_type_ids"] = (torch.arange(9) >= 4).long().expand(3, 9) * mask
    return out


@pytest.fixture(scope="session")
def batch_for() -> Any:
    """``batch_for(hf_config)``: a padded batch suited to that config."""

    def make(cfg: Any, seed: int = 0) -> dict[str, torch.Tensor]:
        return padded_batch(cfg.pad_token_id, getattr(cfg, "type_vocab_size", 0), seed)

    return make


@pytest.fixture(scope="session")
def hf_saver() -> Any:
    """``hf_saver(family, task, folder, **config_overrides)`` -> the saved HF model."""
    pytest.importorskip("transformers")
    return save_hf
