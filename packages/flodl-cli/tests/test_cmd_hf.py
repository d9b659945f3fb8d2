"""``fdl hf``: each subcommand on tiny models made in the test (no download), its one-line
errors, and one run through the installed ``fdl`` script."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flodl_hf", reason="fdl hf needs flodl-hf")

import torch
from safetensors.torch import load_file, save_file

import flodl_hf as fh
from flodl_cli import _cmd_hf

WORDS = ["the", "a", "film", "was", "great", "bad", "cat", "sat", "on", "mat", "paris", "is"]
CONFIG = {
    "model_type": "bert",
    "vocab_size": 40,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 20,
    "max_position_embeddings": 32,
}


def _tokenizer() -> fh.HfTokenizer:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {t: i for i, t in enumerate([*specials, *WORDS])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    tok.decoder = decoders.WordPiece()
    tok.add_special_tokens(specials)
    return fh.HfTokenizer(tok)


def _saved(tmp_path: Path, auto: Any, name: str, **kw: Any) -> Path:
    torch.manual_seed(0)
    model = auto.from_config(CONFIG, tokenizer=_tokenizer(), **kw)
    return fh.export(model, tmp_path / name)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fdl")
    sub = parser.add_subparsers(dest="command")
    _cmd_hf.add_parser(sub)
    return parser


def _run(*argv: str) -> int:
    return _cmd_hf.run(_parser().parse_args(["hf", *argv]))


def test_classify_prints_labels(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(
        tmp_path, fh.AutoModelForSequenceClassification, "cls", id2label={0: "neg", 1: "pos"}
    )
    assert _run("classify", str(folder), "the film was great", "a bad film") == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("the film was great\t")
    assert {w for w in lines[1].split() if w in ("neg", "pos")} == {"neg", "pos"}
    assert _run("classify", str(folder), "a cat", "--json", "--top-k", "1") == 0
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert row["text"] == "a cat" and len(row["labels"]) == 1
    assert row["labels"][0][0] in ("neg", "pos")
    assert err == ""  # a trained head: no warning


@pytest.mark.parametrize(
    ("subcommand", "text", "missing"),
    [
        ("classify", "the film was great", "bert.pooler, classifier"),
        ("fill-mask", "the cat [MASK] on the mat", "cls"),
    ],
)
def test_a_fresh_head_is_said_to_be_untrained(
    subcommand: str, text: str, missing: str, tmp_path: Path, capsys: Any
) -> None:
    folder = _saved(tmp_path, fh.AutoModel, "base")  # an encoder checkpoint: no task head
    state = load_file(str(folder / "model.safetensors"))
    save_file(
        {k: v for k, v in state.items() if not k.startswith("pooler.")},
        str(folder / "model.safetensors"),
    )
    assert _run(subcommand, str(folder), text) == 0
    out, err = capsys.readouterr()
    assert out  # the predictions still come out
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fdl hf: warning: the task head of ")
    assert "freshly initialised" in lines[0] and "meaningless until" in lines[0]
    assert f"has no {missing}:" in lines[0]


def test_options_and_texts_mix_in_any_order(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModelForSequenceClassification, "cls")
    assert _run("classify", str(folder), "--top-k", "1", "a cat", "--json", "the film") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["a cat", "the film"]
    assert all(len(r["labels"]) == 1 for r in rows)
    mlm = _saved(tmp_path, fh.AutoModelForMaskedLM, "mlm")
    assert _run("fill-mask", "--top-k", "2", str(mlm), "the [MASK] sat") == 0
    assert capsys.readouterr().out.startswith("mask 0: ")


def test_texts_from_a_file(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModelForSequenceClassification, "cls")
    (tmp_path / "texts.txt").write_text("the cat\n\na film\n")
    assert _run("classify", str(folder), "--file", str(tmp_path / "texts.txt")) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_fill_mask(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModelForMaskedLM, "mlm")
    assert _run("fill-mask", str(folder), "the cat [MASK] on the mat", "--top-k", "2") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("mask 0: ")
    assert _run("fill-mask", str(folder), "no mask here") == 1
    assert "fdl hf: error: no [MASK] in the text" in capsys.readouterr().err


def test_embed_json_lines_and_safetensors(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModel, "base")
    assert _run("embed", str(folder), "the cat") == 1  # a plain model folder: no pooling
    err = capsys.readouterr().err
    assert "no modules.json" in err and "pass --pooling mean (or cls, max, mean_sqrt_len)" in err
    assert "pooling=" not in err  # the shell's form of the fix, not the Python API's
    assert _run("embed", str(folder), "--pooling", "max", "--batch-size", "2", "a", "b") == 0
    assert len(capsys.readouterr().out.splitlines()) == 2  # options before the texts
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert _run("embed", str(folder), "the cat", "a film was great") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 and len(rows[0]) == 16
    assert abs(sum(v * v for v in rows[0]) - 1.0) < 1e-4  # normalised
    out = tmp_path / "emb.safetensors"
    old = os.umask(0o027)
    try:
        assert _run("embed", str(folder), "the cat", "a mat", "--out", str(out)) == 0
    finally:
        os.umask(old)
    assert load_file(str(out))["embeddings"].shape == (2, 16)
    assert out.stat().st_mode & 0o777 == 0o640  # the umask's mode, not a temp file's 0600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_export_infers_the_task_and_converts(tmp_path: Path, capsys: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModelForTokenClassification, "tok")
    out = tmp_path / "again"
    assert _run("export", str(folder), str(out), "--dtype", "bfloat16") == 0
    assert "exported BertForTokenClassification" in capsys.readouterr().out
    again = fh.AutoModelForTokenClassification.from_pretrained(out)
    assert again.dtype == torch.bfloat16 and again.load_report.ok
    assert _run("export", str(folder), str(out)) == 1
    assert "overwrite=True" in capsys.readouterr().err


def test_verify_export_against_transformers(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("transformers", reason="verify-export's reference")
    folder = _saved(tmp_path, fh.AutoModelForSequenceClassification, "cls")
    assert _run("verify-export", str(folder)) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: BertForSequenceClassification") and "no missing" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["classify", "nowhere/at/all", "x"], "model folder nowhere/at/all does not exist"),
        (["classify", "."], "no texts given"),
        (["embed", ".", "x", "--batch-size", "0"], "--batch-size must be a positive integer"),
        (["classify", ".", "--file", "/no/such/file"], "cannot read --file /no/such/file"),
    ],
)
def test_expected_errors_are_one_line(argv: list[str], needle: str, capsys: Any) -> None:
    assert _run(*argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("fdl hf: error: ") and needle in err and "Traceback" not in err


def test_through_the_fdl_script(tmp_path: Path, fdl: Any) -> None:
    folder = _saved(tmp_path, fh.AutoModelForSequenceClassification, "cls")
    res = fdl(
        "hf", "classify", str(folder), "--top-k", "1", "the film", cwd=tmp_path, HF_HUB_OFFLINE="1"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("the film\t")
    res = fdl("hf", "classify", str(tmp_path / "missing"), "x", cwd=tmp_path)
    assert res.returncode == 1 and "does not exist" in res.stderr
