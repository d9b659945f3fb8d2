"""Repo ids and the HF cache, offline: nothing here touches the network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flodl_hf as fh
from flodl_core import ConfigError, FetchError


def _fake_cache(cache: Path, repo: str, files: dict[str, Path]) -> None:
    """The layout huggingface_hub reads: models--owner--name/{refs/main, snapshots/<sha>/}."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(sha)
    snap = root / "snapshots" / sha
    snap.mkdir(parents=True)
    for name, src in files.items():
        (snap / name).write_bytes(src.read_bytes())


def test_repo_id_needs_an_owner() -> None:
    with pytest.raises(ConfigError, match="owner-qualified") as e:
        fh.AutoModel.from_pretrained("bert-base-uncased")
    assert "google-bert/bert-base-uncased" in str(e.value)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        fh.AutoModel.from_pretrained(tmp_path / "nope")


def test_offline_cache_hit_and_miss(
    tiny_models: dict, tokenizer_file: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fh.hub_offline()
    folder, _ = tiny_models["bert", "tokcls"]
    _fake_cache(
        tmp_path,
        "someone/tiny-bert",
        {
            "config.json": folder / "config.json",
            "model.safetensors": folder / "model.safetensors",
            "tokenizer.json": tokenizer_file,
        },
    )
    model = fh.AutoModelForTokenClassification.from_pretrained(
        "someone/tiny-bert", cache_dir=tmp_path
    )
    assert model.tokenizer is not None and model.load_report.ok
    tok = fh.HfTokenizer.from_pretrained("someone/tiny-bert", cache_dir=tmp_path)
    assert tok.vocab_size == model.tokenizer.vocab_size
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE"):
        fh.AutoModel.from_pretrained("someone/absent", cache_dir=tmp_path)


def test_config_file_instead_of_folder(tiny_models: dict) -> None:
    folder, _ = tiny_models["bert", "base"]
    with pytest.raises(
        ConfigError, match=r"is a file; from_pretrained wants the model folder"
    ) as e:
        fh.AutoModel.from_pretrained(str(folder / "config.json"))
    assert repr(str(folder)) in str(e.value)  # names the folder to pass instead


def test_missing_relative_path_is_not_tried_on_the_hub(tmp_path: Path, monkeypatch: Any) -> None:
    import huggingface_hub

    def never(*args: Any, **kwargs: Any) -> str:
        raise AssertionError("a local path was sent to the Hub")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", never)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    for path in ("models/my-bert", "models/deep/er", "runs\\\\bert"):
        with pytest.raises(ConfigError, match="does not exist"):
            fh.AutoModel.from_pretrained(path)


def test_offline_remark_only_for_hub_ids(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fh.HfConfig.from_dict({"model_type": "bert"}).save(tmp_path / "config.json")
    with pytest.raises(FetchError) as e:
        fh.AutoModel.from_pretrained(tmp_path)
    assert "has no weights" in str(e.value) and "HF_HUB_OFFLINE" not in str(e.value)
    with pytest.raises(FetchError, match="HF_HUB_OFFLINE"):
        fh.AutoModel.from_pretrained("someone/not-cached", cache_dir=tmp_path / "cache")
