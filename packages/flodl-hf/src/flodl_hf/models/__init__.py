"""The layer modules of the six families and their assembly into flodl graphs."""

from ._albert import AlbertLayer as AlbertLayer
from ._albert import AlbertTransformer as AlbertTransformer
from ._assemble import FAMILIES as FAMILIES
from ._assemble import TASKS as TASKS
from ._assemble import Assembly as Assembly
from ._assemble import build as build
from ._bert import BertEmbeddings as BertEmbeddings
from ._bert import BertLayer as BertLayer
from ._bert import roberta_position_ids as roberta_position_ids
from ._deberta_v2 import DebertaV2Embeddings as DebertaV2Embeddings
from ._deberta_v2 import DebertaV2Layer as DebertaV2Layer
from ._deberta_v2 import DisentangledSelfAttention as DisentangledSelfAttention
from ._distilbert import TransformerBlock as TransformerBlock
from ._layers import Activation as Activation
from ._layers import additive_mask as additive_mask

__all__ = [
    "FAMILIES",
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
    "TransformerBlock",
    "additive_mask",
    "build",
    "roberta_position_ids",
]
