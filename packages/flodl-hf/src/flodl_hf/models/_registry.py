"""The supported families by ``model_type``: the one list to extend with a new family file."""

from __future__ import annotations

from flodl_core import ConfigError, format_choices

from ._albert import ALBERT
from ._bert import BERT
from ._deberta_v2 import DEBERTA_V2
from ._distilbert import DISTILBERT
from ._electra import ELECTRA
from ._family import Family
from ._modernbert import MODERNBERT
from ._mpnet import MPNET
from ._roberta import ROBERTA, XLM_ROBERTA

FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        ALBERT,
        BERT,
        DEBERTA_V2,
        DISTILBERT,
        ELECTRA,
        MODERNBERT,
        MPNET,
        ROBERTA,
        XLM_ROBERTA,
    )
}

#: Every ``model_type`` flodl-hf loads, sorted.
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(FAMILIES))


def family_of(model_type: object) -> Family:
    """The family of ``model_type``; a :class:`ConfigError` naming the supported ones if none."""
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise ConfigError(
            f"model_type {model_type!r} is not supported; supported model types: "
            f"{format_choices(FAMILIES)}"
        )
    return FAMILIES[model_type]
