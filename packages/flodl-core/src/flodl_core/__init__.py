"""flodl-core: the bottom layer of flodl.

Everything a training script needs below the graph builder, importable from here::

    from flodl_core import Linear, GELU, Adam, mse_loss, save_checkpoint, DataLoader
"""

from . import checkpoint, data, losses, nn, optim
from ._atomic import atomic_open as atomic_open
from ._atomic import atomic_path as atomic_path
from ._atomic import atomic_write as atomic_write
from ._checks import check_finite as check_finite
from ._checks import check_int as check_int
from ._checks import check_path as check_path
from ._device import DeviceLike as DeviceLike
from ._device import GpuInfo as GpuInfo
from ._device import cuda_available as cuda_available
from ._device import default_device as default_device
from ._device import detect_gpus as detect_gpus
from ._device import manual_seed as manual_seed
from ._device import resolve_device as resolve_device
from ._errors import BuildError as BuildError
from ._errors import CheckpointError as CheckpointError
from ._errors import ConfigError as ConfigError
from ._errors import DataError as DataError
from ._errors import FetchError as FetchError
from ._errors import FlodlError as FlodlError
from ._errors import PathError as PathError
from ._errors import ShapeError as ShapeError
from ._errors import VersionMismatchError as VersionMismatchError
from ._errors import format_choices as format_choices
from ._log import Verbosity as Verbosity
from ._log import set_verbosity as set_verbosity
from ._log import verbosity as verbosity
from ._observable import Observable as Observable
from ._versions import __version__ as __version__
from ._versions import check_siblings as check_siblings
from .checkpoint import *  # noqa: F403
from .data import *  # noqa: F403
from .losses import *  # noqa: F403
from .nn import *  # noqa: F403
from .optim import *  # noqa: F403

__all__ = [
    "BuildError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "DeviceLike",
    "FetchError",
    "FlodlError",
    "GpuInfo",
    "Observable",
    "PathError",
    "ShapeError",
    "Verbosity",
    "VersionMismatchError",
    "__version__",
    "atomic_open",
    "atomic_path",
    "atomic_write",
    "check_finite",
    "check_int",
    "check_path",
    "check_siblings",
    "cuda_available",
    "default_device",
    "detect_gpus",
    "format_choices",
    "manual_seed",
    "resolve_device",
    "set_verbosity",
    "verbosity",
    *checkpoint.__all__,
    *data.__all__,
    *losses.__all__,
    *nn.__all__,
    *optim.__all__,
]
