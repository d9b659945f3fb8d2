"""The ten benchmark models of floDl (Rust)'s table, each as a flodl graph and by hand."""

from __future__ import annotations

from . import (
    conv_autoenc,
    convnet,
    feedback_fixed,
    gated_routing,
    gru_seq,
    iterative_refine,
    lstm_seq,
    mlp,
    residual_tower,
    transformer,
)
from ._common import Bench as Bench

MODELS: dict[str, Bench] = {
    m.BENCH.name: m.BENCH
    for m in (
        transformer,
        mlp,
        residual_tower,
        feedback_fixed,
        gated_routing,
        iterative_refine,
        gru_seq,
        conv_autoenc,
        lstm_seq,
        convnet,
    )
}

__all__ = ["MODELS", "Bench"]
