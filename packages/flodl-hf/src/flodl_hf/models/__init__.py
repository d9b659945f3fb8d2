"""The encoder families, each declared once as a :class:`Family`, and their assembly into flodl
graphs (:func:`build`)."""

from ._albert import AlbertLayer as AlbertLayer
from ._albert import AlbertTransformer as AlbertTransformer
from ._assemble import Assembly as Assembly
from ._assemble import build as build
from ._bert import BertEmbeddings as BertEmbeddings
from ._bert import BertLayer as BertLayer
from ._bert import roberta_position_ids as roberta_position_ids
from ._deberta_v2 import DebertaV2Embeddings as DebertaV2Embeddings
from ._deberta_v2 import DebertaV2Layer as DebertaV2Layer
from ._deberta_v2 import DisentangledSelfAttention as DisentangledSelfAttention
from ._distilbert import TransformerBlock as TransformerBlock
from ._family import TASKS as TASKS
from ._family import Family as Family
from ._layers import Activation as Activation
from ._layers import additive_mask as additive_mask
from ._modernbert import ModernBertLayer as ModernBertLayer
from ._modernbert import rotary_cos_sin as rotary_cos_sin
from ._mpnet import MPNetLayer as MPNetLayer
from ._mpnet import relative_position_bucket as relative_position_bucket
from ._registry import FAMILIES as FAMILIES
from ._registry import SUPPORTED_MODEL_TYPES as SUPPORTED_MODEL_TYPES
from ._registry import family_of as family_of

__all__ = [
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "TASKS",
    "Activation",
    "AlbertLayer",
    "AlbertTransformer",
    "Assembly",
    "BertEmbeddings",
    "BertLayer",
    "DebertaV2Embeddings",
    "DebertaV2Layer",
    "DisentangledSelfAttention",
    "Family",
    "MPNetLayer",
    "ModernBertLayer",
    "TransformerBlock",
    "additive_mask",
    "build",
    "family_of",
    "relative_position_bucket",
    "roberta_position_ids",
    "rotary_cos_sin",
]
