"""What the dashboard header shows about the model, read by duck typing.

flodl-monitor does not import flodl-graph: any model may offer ``label``, ``short_hash()`` or
``structural_hash()``, ``svg()`` and ``parameters()``; what it lacks is simply not shown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("flodl.monitor")


@dataclass(frozen=True)
class ModelIdentity:
    """Label, structural hash and ``{"total", "trainable", "frozen"}`` element counts."""

    label: str | None = None
    hash: str | None = None
    parameters: dict[str, int] | None = None

    @property
    def empty(self) -> bool:
        return self.label is None and self.hash is None and self.parameters is None


def _attr(model: Any, name: str) -> Any:
    value = getattr(model, name, None)
    return value() if callable(value) else value


def identify(model: Any) -> ModelIdentity:
    label = _attr(model, "label")
    digest: Any = None
    for name in ("short_hash", "structural_hash"):
        digest = _attr(model, name)
        if digest is not None:
            break
    if isinstance(digest, (bytes, bytearray)):
        digest = digest.hex()
    params: dict[str, int] | None = None
    parameters = getattr(model, "parameters", None)
    if callable(parameters):
        total = trainable = 0
        for p in parameters():
            n = int(p.numel())
            total += n
            trainable += n if getattr(p, "requires_grad", True) else 0
        params = {"total": total, "trainable": trainable, "frozen": total - trainable}
    return ModelIdentity(
        label if isinstance(label, str) else None,
        digest if isinstance(digest, str) else None,
        params,
    )


def model_svg(model: Any) -> str | None:
    """``model.svg()`` when it exists and works (it may need Graphviz, which may be missing)."""
    fn = getattr(model, "svg", None)
    if not callable(fn):
        return None
    try:
        svg = fn()
    except Exception as e:  # a missing renderer must not stop training; the panel stays empty
        logger.info("graph SVG unavailable: %s", e)
        return None
    return svg if isinstance(svg, str) and "<svg" in svg else None
