"""The ``.fdl`` checkpoint format, state files for optimizers and friends, background saving.

``.fdl`` files are byte-compatible with the Rust floDl: the same magic, version, structural hash
and tensor entries, gzip-compressed when the path ends ``.gz``.
"""

from ._inspect import CheckpointKey as CheckpointKey
from ._inspect import checkpoint_hash as checkpoint_hash
from ._inspect import checkpoint_keys as checkpoint_keys
from ._inspect import checkpoint_version as checkpoint_version
from ._inspect import read_checkpoint_metadata as read_checkpoint_metadata
from ._io import CheckpointNotFoundError as CheckpointNotFoundError
from ._load import LoadReport as LoadReport
from ._load import load_checkpoint as load_checkpoint
from ._migrate import MigrateReport as MigrateReport
from ._migrate import migrate_checkpoint as migrate_checkpoint
from ._migrate_optim import migrate_optim_state_file as migrate_optim_state_file
from ._module import plain_name as plain_name
from ._save import save_checkpoint as save_checkpoint
from ._save import write_checkpoint as write_checkpoint
from ._snapshot import ModelSnapshot as ModelSnapshot
from ._state import load_state_file as load_state_file
from ._state import read_state_file as read_state_file
from ._state import save_state_file as save_state_file
from ._worker import CpuWorker as CpuWorker

__all__ = [
    "CheckpointKey",
    "CheckpointNotFoundError",
    "CpuWorker",
    "LoadReport",
    "MigrateReport",
    "ModelSnapshot",
    "checkpoint_hash",
    "checkpoint_keys",
    "checkpoint_version",
    "load_checkpoint",
    "load_state_file",
    "migrate_checkpoint",
    "migrate_optim_state_file",
    "plain_name",
    "read_checkpoint_metadata",
    "read_state_file",
    "save_checkpoint",
    "save_state_file",
    "write_checkpoint",
]
