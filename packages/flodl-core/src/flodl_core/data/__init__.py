"""Data loading: ``DataLoader`` (resident and streaming modes), datasets and parsers.

``flodl_core.data.datasets`` holds the MNIST / CIFAR-10 / Shakespeare parsers and ``fetch``.
"""

from . import datasets as datasets
from ._batch import Batch as Batch
from ._builder import DataLoaderBuilder as DataLoaderBuilder
from ._dataset import BatchDataSet as BatchDataSet
from ._dataset import DataSet as DataSet
from ._dataset import ItemDataSet as ItemDataSet
from ._dataset import TensorDataSet as TensorDataSet
from ._dataset import as_batch_dataset as as_batch_dataset
from ._loader import DataLoader as DataLoader
from ._sampler import epoch_permutation as epoch_permutation
from ._sampler import even_shard as even_shard
from ._sampler import weighted_shards as weighted_shards
from ._streaming import StreamingEpoch as StreamingEpoch

__all__ = [
    "Batch",
    "BatchDataSet",
    "DataLoader",
    "DataLoaderBuilder",
    "DataSet",
    "ItemDataSet",
    "StreamingEpoch",
    "TensorDataSet",
    "as_batch_dataset",
    "epoch_permutation",
    "even_shard",
    "weighted_shards",
]
