"""Parsers of the classic datasets (pure: bytes in, tensors out) and their downloader.

Each parsed set is a :class:`~flodl_core.data.BatchDataSet`: hand it straight to a
:class:`~flodl_core.data.DataLoader`.
"""

from ._cifar import Cifar10 as Cifar10
from ._fetch import REGISTRY as REGISTRY
from ._fetch import RemoteFile as RemoteFile
from ._fetch import fetch as fetch
from ._fetch import sha256_file as sha256_file
from ._mnist import Mnist as Mnist
from ._shakespeare import Shakespeare as Shakespeare

__all__ = ["REGISTRY", "Cifar10", "Mnist", "RemoteFile", "Shakespeare", "fetch", "sha256_file"]
