"""Repo ids, the HF cache and an unreachable Hub: nothing here leaves 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flodl_hf as fh
from flodl_core import CheckpointError, ConfigError, FetchError
from flodl_hf import _hub

TINY = {
    "model_type": "bert",
    "vocab_size": 40,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 8,
    "max_position_embeddings": 16,
}


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


def _online_at(monkeypatch: Any, endpoint: str) -> None:
    """Hub access switched on, towards ``endpoint`` only (its downloads included)."""
    from huggingface_hub import constants

    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(_hub, "_probes", {})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once closed


@pytest.fixture
def answering_endpoint() -> Iterator[str]:
    """A local server answering every request 404: reachable, though not a Hub."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_an_unreachable_hub_fails_fast_with_the_way_out(tmp_path: Path, monkeypatch: Any) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    _online_at(monkeypatch, endpoint)
    assert not fh.hub_offline()
    start = time.monotonic()
    with pytest.raises(FetchError) as e:
        fh.AutoModel.from_pretrained("someone/tiny-bert", cache_dir=tmp_path)
    assert time.monotonic() - start < 10  # huggingface_hub alone retries for ~25 s
    msg = str(e.value)
    assert msg.startswith("someone/tiny-bert: cannot get config.json: the Hugging Face Hub at")
    assert endpoint in msg and "is unreachable (offline?" in msg
    assert "not in the local cache" in msg and "pass the path of a local model folder" in msg


def test_an_unreachable_hub_still_serves_the_cache(tmp_path: Path, monkeypatch: Any) -> None:
    folder = fh.export(fh.AutoModelForTokenClassification.from_config(TINY), tmp_path / "m")
    files = {n: folder / n for n in ("config.json", "model.safetensors")}
    _fake_cache(tmp_path / "cache", "someone/cached", files)
    _online_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}")
    start = time.monotonic()
    model = fh.AutoModelForTokenClassification.from_pretrained(
        "someone/cached", cache_dir=tmp_path / "cache"
    )
    assert model.load_report.ok and model.tokenizer is None  # tokenizer.json: optional, absent
    assert time.monotonic() - start < 10
    cfg = {**TINY, "num_hidden_layers": 2}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    _fake_cache(tmp_path / "cache", "someone/no-weights", {"config.json": tmp_path / "c.json"})
    with pytest.raises(FetchError, match=r"has no weights: tried .* is unreachable"):
        fh.AutoModel.from_pretrained("someone/no-weights", cache_dir=tmp_path / "cache")


def test_a_reachable_hub_is_asked_and_the_check_is_reused(
    answering_endpoint: str, tmp_path: Path, monkeypatch: Any
) -> None:
    import huggingface_hub

    _online_at(monkeypatch, answering_endpoint)
    folder = fh.export(fh.AutoModel.from_config(TINY), tmp_path / "m")
    asked: list[tuple[str, bool]] = []

    def download(repo_id: str, filename: str, **kw: Any) -> str:
        asked.append((filename, kw["local_files_only"]))
        if not (folder / filename).is_file():
            raise huggingface_hub.errors.EntryNotFoundError(filename)
        return str(folder / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    import huggingface_hub.utils as hub_utils

    probes: list[int] = []
    session = hub_utils.get_session

    def counting() -> Any:
        probes.append(1)
        return session()

    monkeypatch.setattr(hub_utils, "get_session", counting)  # read when a check runs
    model = fh.AutoModel.from_pretrained("someone/online", cache_dir=tmp_path / "cache")
    assert model.load_report.ok
    assert asked and all(not local for _, local in asked)  # downloads allowed
    assert [name for name, _ in asked][:2] == ["config.json", "model.safetensors"]
    assert probes == [1]  # one check for the several files


def test_hub_shards_outside_the_repo_are_never_fetched(
    answering_endpoint: str, tmp_path: Path, monkeypatch: Any
) -> None:
    import huggingface_hub

    _online_at(monkeypatch, answering_endpoint)
    folder = fh.export(fh.AutoModel.from_config(TINY), tmp_path / "m")
    index = {"weight_map": {"x": "../../outside.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "model.safetensors").unlink()
    asked: list[str] = []

    def download(repo_id: str, filename: str, **kw: Any) -> str:
        asked.append(filename)
        if not (folder / filename).is_file():
            raise huggingface_hub.errors.EntryNotFoundError(filename)
        return str(folder / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(CheckpointError, match="outside its model folder"):
        fh.AutoModel.from_pretrained("someone/sharded", cache_dir=tmp_path / "cache")
    assert "../../outside.safetensors" not in asked


def test_an_optional_file_of_an_uncached_repo_is_not_taken_as_absent(
    tokenizer_file: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """Without the Hub, "no modules.json" is only known for a repo the cache holds."""
    folder = fh.export(fh.AutoModel.from_config(TINY), tmp_path / "m")
    files = {n: folder / n for n in ("config.json", "model.safetensors")}
    files["tokenizer.json"] = tokenizer_file
    _fake_cache(tmp_path / "cache", "someone/cached", files)
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FetchError, match=r"cannot get modules\.json .*HF_HUB_OFFLINE"):
        fh.SentenceEncoder.from_pretrained("someone/absent", cache_dir=cache)
    with pytest.raises(fh.PoolingRequiredError, match=r"someone/cached has no modules\.json"):
        fh.SentenceEncoder.from_pretrained("someone/cached", cache_dir=cache)
    _online_at(monkeypatch, f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(FetchError) as e:
        fh.SentenceEncoder.from_pretrained("someone/absent", cache_dir=cache)
    assert "is unreachable" in str(e.value)
    assert "someone/absent is not in the local cache" in str(e.value)
    with pytest.raises(fh.PoolingRequiredError, match=r"someone/cached has no modules\.json"):
        fh.SentenceEncoder.from_pretrained("someone/cached", cache_dir=cache)
    enc = fh.SentenceEncoder.from_pretrained("someone/cached", cache_dir=cache, pooling="cls")
    assert enc.encode(["the cat"]).shape == (1, 8)  # from the cache, the Hub unreachable


@pytest.mark.parametrize("bad", [None, 5])
def test_repo_or_dir_of_the_wrong_type_is_named(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"repo_or_dir must be a model folder or an 'owner/name'"):
        fh.AutoModel.from_pretrained(bad)  # type: ignore[arg-type]
