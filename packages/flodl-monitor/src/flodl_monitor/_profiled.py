"""The graph diagram the dashboard shows, plain or heat-coloured by profiling.

flodl-monitor does not import flodl-graph. A model offers its diagram by duck typing, on itself
or on a ``viz`` namespace (a flodl ``Graph`` has both; an ``HfModel`` has ``model.viz``):
``svg()``, and for the profiled view ``profile()`` (None before a profiled forward) and
``svg_with_profile()``. The profiled SVG heat-colours every node by its time in the last
profiled forward (green fast, red slow) and prints the node's time and each level's wall time.
"""

from __future__ import annotations

import logging
from typing import Any

from ._identity import model_svg

__all__ = ["diagram_svg"]

logger = logging.getLogger("flodl.monitor")


def _viz(model: Any) -> Any:
    """The object that draws ``model``: the model itself, else its ``viz`` namespace."""
    if callable(getattr(model, "svg", None)):
        return model
    viz = getattr(model, "viz", None)
    return viz if viz is not None and callable(getattr(viz, "svg", None)) else model


def diagram_svg(model: Any, *, profiled: bool) -> str | None:
    """The model's SVG (None when it offers none or drawing fails; training must go on).

    With ``profiled``, the heat-mapped SVG when the model has a profile; the plain one, with a
    warning naming what to do, when it has not.
    """
    viz = _viz(model)
    if not profiled:
        return model_svg(viz)
    profile = getattr(viz, "profile", None)
    draw = getattr(viz, "svg_with_profile", None)
    if not callable(profile) or not callable(draw):
        logger.warning("%s offers no profiled diagram; showing the plain one", type(model).__name__)
        return model_svg(viz)
    if profile() is None:
        logger.warning(
            "no profile yet: showing the plain graph (call enable_profiling() and run a "
            "forward before watch_profiled/finish_with)"
        )
        return model_svg(viz)
    try:
        svg = draw()
    except Exception as e:  # a failing renderer must not stop training; fall back to plain
        logger.warning("profiled graph SVG unavailable (%s); showing the plain one", e)
        return model_svg(viz)
    return svg if isinstance(svg, str) and "<svg" in svg else None
