"""``export``: write a model back in HF format (``model.safetensors`` + ``config.json``
(+ ``tokenizer.json``)), loadable by ``transformers.AutoModelFor*`` with no missing or unexpected
keys."""

from __future__ import annotations

import os
from pathlib import Path

from safetensors.torch import save_file

from flodl_core import ConfigError, atomic_path, atomic_write

from ._model import HfModel
from ._tokenizer import HfTokenizer, check_tokenizer


def export(
    model: HfModel,
    out_dir: str | os.PathLike[str],
    *,
    tokenizer: HfTokenizer | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` (and its tokenizer, or ``tokenizer``) to ``out_dir``; returns the folder.

    Tied decoder weights are left out (transformers re-ties them), base models get bare keys,
    ``config.json`` names the transformers architecture (``BertForSequenceClassification`` ...)
    and the current dtype. Each file is written atomically. An existing export is kept unless
    ``overwrite=True``.
    """
    if not isinstance(model, HfModel):
        raise ConfigError(f"export expects a flodl_hf model, got {type(model).__name__}")
    # Checked before anything is written: a bad tokenizer found after the weights would leave
    # a partial export that the next call refuses to overwrite.
    tok = tokenizer or model.tokenizer
    check_tokenizer(tok)
    out = Path(out_dir)
    target = out / "model.safetensors"
    if target.exists() and not overwrite:
        raise ConfigError(f"{target} exists; pass overwrite=True to replace it")
    tensors = {k: v.detach().contiguous() for k, v in model.hf_state_dict().items()}
    meta = {"format": "pt"}
    with atomic_path(target, parents=True) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
    config = model.config.to_dict(architectures=[model.architecture])
    config["dtype"] = str(model.dtype).removeprefix("torch.")
    import json

    atomic_write(
        out / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n", parents=True
    )
    if tok is not None:
        tok.save(out / "tokenizer.json")
    return out
