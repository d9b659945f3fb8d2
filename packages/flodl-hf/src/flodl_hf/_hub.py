"""Resolve ``repo_or_dir`` to a local folder: a directory as is, or a Hub repo through
``huggingface_hub`` (its cache, its ``HF_HUB_OFFLINE`` switch, its token handling)."""

from __future__ import annotations

import os
from pathlib import Path

from flodl_core import ConfigError, FetchError

from ._weights import WEIGHT_FILES

try:  # huggingface_hub >= 0.24 keeps its errors here
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
except ImportError:  # pragma: no cover - older huggingface_hub
    from huggingface_hub.utils import EntryNotFoundError, LocalEntryNotFoundError

_TRUE = {"1", "true", "yes", "on"}


def hub_offline() -> bool:
    """Whether Hub access is switched off (``HF_HUB_OFFLINE``, read at call time)."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE:
        return True
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def check_repo_id(repo_id: str) -> None:
    """Refuse ids without an owner: the Hub serves models as ``owner/name``."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(
            f"{repo_id!r} is neither an existing folder nor an owner-qualified Hub repo id; "
            "Hub models are named 'owner/name' (e.g. 'google-bert/bert-base-uncased', not "
            "'bert-base-uncased')"
        )


def _is_local(repo_or_dir: str | os.PathLike[str]) -> bool:
    """A path, not a Hub id: a ``Path``, anything that exists, starts like a path, has more than
    two parts, or whose first part is an existing local folder (``models/my-bert``)."""
    text = os.fspath(repo_or_dir)
    parts = text.replace("\\", "/").split("/")
    return (
        isinstance(repo_or_dir, os.PathLike)
        or text.startswith((".", "/", "~"))
        or "\\" in text
        or os.path.isabs(text)
        or Path(text).exists()
        or len(parts) > 2
        or (len(parts) == 2 and Path(parts[0]).expanduser().is_dir())
    )


def _local_folder(repo_or_dir: str | os.PathLike[str]) -> Path:
    """The model folder, or a :class:`ConfigError` saying what is wrong with the path."""
    folder = Path(repo_or_dir).expanduser()
    if folder.is_file():
        raise ConfigError(
            f"{folder} is a file; from_pretrained wants the model folder that holds config.json "
            f"and the weights: pass {str(folder.parent)!r}"
        )
    if not folder.is_dir():
        raise ConfigError(
            f"model folder {folder} does not exist (resolved to {folder.absolute()}); "
            "Hub models are named 'owner/name'"
        )
    return folder


def resolve_file(
    repo_or_dir: str | os.PathLike[str],
    filename: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    required: bool = True,
) -> Path | None:
    """The local path of ``filename`` from a folder or Hub repo; ``None`` if optional and absent."""
    if _is_local(repo_or_dir):
        folder = _local_folder(repo_or_dir)
        path = folder / filename
        if path.is_file():
            return path
        if required:
            raise ConfigError(f"model folder {folder} has no {filename}")
        return None
    repo_id = os.fspath(repo_or_dir)
    check_repo_id(repo_id)
    from huggingface_hub import hf_hub_download

    offline = hub_offline()
    try:
        return Path(
            hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                cache_dir=cache_dir,
                local_files_only=offline,
            )
        )
    except (EntryNotFoundError, LocalEntryNotFoundError) as e:
        if not required:
            return None
        hint = " (HF_HUB_OFFLINE is set and it is not in the cache)" if offline else ""
        raise FetchError(f"{repo_id}: cannot get {filename}{hint}: {e}") from None
    except Exception as e:  # network, auth, missing repo: all reported the same way
        raise FetchError(f"{repo_id}: cannot get {filename}: {type(e).__name__}: {e}") from None


def resolve_weights(
    repo_or_dir: str | os.PathLike[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The weight file of a folder or repo, preferring ``model.safetensors``."""
    for name in WEIGHT_FILES:
        path = resolve_file(
            repo_or_dir, name, revision=revision, cache_dir=cache_dir, required=False
        )
        if path is not None:
            if name.endswith(".index.json") and not _is_local(repo_or_dir):
                _fetch_shards(path, os.fspath(repo_or_dir), revision, cache_dir)
            return path
    local = _is_local(repo_or_dir)
    where = "folder" if local else "repo"
    offline = ""
    if not local and hub_offline():
        offline = " (HF_HUB_OFFLINE is set: only cached files count)"
    raise FetchError(
        f"{where} {os.fspath(repo_or_dir)} has no weights: tried {', '.join(WEIGHT_FILES)}{offline}"
    )


def _fetch_shards(
    index: Path, repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None
) -> None:
    import json

    shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    for shard in sorted(shards):
        resolve_file(repo_id, shard, revision=revision, cache_dir=cache_dir)
