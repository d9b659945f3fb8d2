"""Resolve ``repo_or_dir`` to a local folder: a directory as is, or a Hub repo through
``huggingface_hub`` (its cache, its ``HF_HUB_OFFLINE`` switch, its token handling).

Before the first download from a Hub endpoint, one quick request checks that the endpoint
answers at all. When it does not, files come from the local cache only: ``huggingface_hub``
would otherwise retry each missing file with back-off for about 25 seconds before failing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from flodl_core import ConfigError, FetchError, check_path

from ._weights import WEIGHT_FILES, read_index

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


#: Seconds the reachability check waits for the Hub to answer.
PROBE_TIMEOUT_S = 3.0
#: Seconds a check's answer is reused (one ``from_pretrained`` asks for several files).
_PROBE_TTL_S = 30.0
_probes: dict[str, tuple[float, str | None]] = {}


def hub_endpoint() -> str:
    """The Hub ``huggingface_hub`` talks to (``HF_ENDPOINT``, default https://huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def hub_unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` cannot be reached now, or None when it answers (any HTTP status counts).

    One HEAD request through ``huggingface_hub``'s own HTTP session (its proxies and
    certificates), at most :data:`PROBE_TIMEOUT_S` seconds; the answer is kept for 30 seconds.
    """
    seen = _probes.get(endpoint)
    if seen is not None and time.monotonic() - seen[0] < _PROBE_TTL_S:
        return seen[1]
    from huggingface_hub.utils import get_session

    reason: str | None = None
    try:
        get_session().head(endpoint, timeout=PROBE_TIMEOUT_S)
    except Exception as e:  # DNS, refused, timeout, TLS, proxy: all mean "not reachable now"
        reason = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    _probes[endpoint] = (time.monotonic(), reason)
    return reason


def _unreachable_hint(endpoint: str, reason: str, what: str) -> str:
    return (
        f"the Hugging Face Hub at {endpoint} is unreachable (offline? {reason}) and {what} in "
        "the local cache; "
        "connect to the network (or fix HF_ENDPOINT / the proxy settings), or pass the path of "
        "a local model folder instead (a folder holding config.json and the weights, e.g. "
        "./my-model)"
    )


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
    check_path(repo_or_dir, "repo_or_dir", expected="a model folder or an 'owner/name' Hub repo id")
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
    endpoint = hub_endpoint()
    unreachable = None if offline else hub_unreachable(endpoint)
    try:
        return Path(
            hf_hub_download(
                repo_id,
                filename,
                revision=revision,
                cache_dir=cache_dir,
                local_files_only=offline or unreachable is not None,
            )
        )
    except (EntryNotFoundError, LocalEntryNotFoundError) as e:
        # From the cache alone, an optional file is known to be absent only when the repo
        # itself is there: otherwise "no modules.json" would hide "this repo is not cached".
        cached = _in_cache(repo_id, revision, cache_dir)
        if not required and (not (offline or unreachable) or cached):
            return None
        if unreachable is not None:
            what = f"{filename} is not" if cached else f"{repo_id} is not"
            hint = _unreachable_hint(endpoint, unreachable, what)
            raise FetchError(f"{repo_id}: cannot get {filename}: {hint}") from None
        hint = " (HF_HUB_OFFLINE is set and it is not in the cache)" if offline else ""
        raise FetchError(f"{repo_id}: cannot get {filename}{hint}: {e}") from None
    except Exception as e:  # network, auth, missing repo: all reported the same way
        raise FetchError(f"{repo_id}: cannot get {filename}: {type(e).__name__}: {e}") from None


def _in_cache(repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None) -> bool:
    """Whether the HF cache holds a snapshot of ``repo_id`` at ``revision`` (a branch or tag it
    recorded under ``refs/``, or a commit): the cache layout huggingface_hub documents."""
    from huggingface_hub import constants

    root = Path(cache_dir or constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    ref = root / "refs" / rev
    try:
        commit = ref.read_text(encoding="utf-8").strip() if ref.is_file() else rev
    except OSError:
        return False
    return bool(commit) and (root / "snapshots" / commit).is_dir()


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
    elif not local and (reason := hub_unreachable(hub_endpoint())) is not None:
        offline = f" ({_unreachable_hint(hub_endpoint(), reason, 'none of them is')})"
    raise FetchError(
        f"{where} {os.fspath(repo_or_dir)} has no weights: tried {', '.join(WEIGHT_FILES)}{offline}"
    )


def _fetch_shards(
    index: Path, repo_id: str, revision: str | None, cache_dir: str | os.PathLike[str] | None
) -> None:
    for shard in sorted(set(read_index(index).values())):
        resolve_file(repo_id, shard, revision=revision, cache_dir=cache_dir)
