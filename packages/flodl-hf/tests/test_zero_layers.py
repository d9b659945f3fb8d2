"""A model with zero encoder layers is refused by the config, by name, before any graph is built
(an empty layer stack would otherwise reach ``FlowBuilder().build()``, which refuses empty
graphs with a message about the builder rather than the config)."""

from __future__ import annotations

import dataclasses

import pytest

import flodl_hf as fh
from flodl_core import ConfigError

TINY = {
    "vocab_size": 40,
    "hidden_size": 8,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 8,
    "max_position_embeddings": 16,
    "pad_token_id": 0,
}
NEEDLE = "config num_hidden_layers must be a positive integer, got 0"


@pytest.mark.parametrize("model_type", fh.SUPPORTED_MODEL_TYPES)
def test_zero_layers_is_a_config_error(model_type: str) -> None:
    with pytest.raises(ConfigError, match=NEEDLE):
        fh.HfConfig.from_dict({**TINY, "model_type": model_type, "num_hidden_layers": 0})


@pytest.mark.parametrize("model_type", fh.SUPPORTED_MODEL_TYPES)
def test_a_config_changed_to_zero_layers_is_refused_before_building(model_type: str) -> None:
    config = fh.HfConfig.from_dict({**TINY, "model_type": model_type})
    assert fh.AutoModel.from_config(config).config.num_hidden_layers == 1  # the tiny one builds
    config.num_hidden_layers = 0  # a plain dataclass: nothing stops the assignment itself
    with pytest.raises(ConfigError, match=NEEDLE):
        fh.AutoModel.from_config(config)
    with pytest.raises(ConfigError, match=NEEDLE):
        dataclasses.replace(config)
