"""flodl-ddp: heterogeneous data-parallel training on ``torch.distributed``.

Devices of different speeds train one model together: ElChe sets how many batches each rank runs
between averagings (the slowest anchors the cadence), parameters are averaged weighted by batch
counts, convergence guards hold the cadence back when replicas drift apart, and outer optimizers
(SlowMo, DiLoCo) turn each averaging into a step. Entry points: :meth:`Trainer.builder` (managed),
:meth:`Trainer.setup` (cooperative) and, over your own process group, the bypass functions
(:func:`sync_params`, :func:`all_reduce_gradients`, ...).
"""

from flodl_core import check_siblings
from flodl_monitor import Timeline, TimelineEvent, TimelineSample, TimelineSpan

from ._admission import admit
from ._buckets import all_reduce_buckets, broadcast_buckets, plan_buckets
from ._bypass import (
    all_reduce_gradients,
    sync_buffers,
    sync_params,
    verify_replicas,
    weighted_all_reduce_gradients,
)
from ._config import DdpConfig, TrainerConfig
from ._elastic import ElasticOptions
from ._elastic_launch import ElasticHandle
from ._elche import ElChe, Phase
from ._elche_config import ElCheConfig
from ._errors import DdpError
from ._guards import (
    ActionKind,
    ConvergenceAction,
    ConvergenceGuard,
    DivergenceReport,
    MsfGuard,
    NoGuard,
    TrendGuard,
)
from ._handle import DdpHandle, TrainedState
from ._meta import MetaController
from ._metrics import EpochMetrics, Progress, RankMetrics, record_scalar
from ._modes import MODES, Backend, Mode, Policy, parse_mode
from ._outer import DiLoCo, OuterAvg, OuterOptimizer, SlowMo, TorchOuter
from ._partition import Partition, partition, split_sizes
from ._session import DdpSession
from ._trainer import Trainer, TrainerBuilder

__version__ = "0.1.0"
check_siblings("flodl-ddp", __version__, ("flodl-core", "flodl-monitor"))

__all__ = [
    "MODES",
    "ActionKind",
    "Backend",
    "ConvergenceAction",
    "ConvergenceGuard",
    "DdpConfig",
    "DdpError",
    "DdpHandle",
    "DdpSession",
    "DiLoCo",
    "DivergenceReport",
    "ElChe",
    "ElCheConfig",
    "ElasticHandle",
    "ElasticOptions",
    "EpochMetrics",
    "MetaController",
    "Mode",
    "MsfGuard",
    "NoGuard",
    "OuterAvg",
    "OuterOptimizer",
    "Partition",
    "Phase",
    "Policy",
    "Progress",
    "RankMetrics",
    "SlowMo",
    "Timeline",
    "TimelineEvent",
    "TimelineSample",
    "TimelineSpan",
    "TorchOuter",
    "TrainedState",
    "Trainer",
    "TrainerBuilder",
    "TrainerConfig",
    "TrendGuard",
    "__version__",
    "admit",
    "all_reduce_buckets",
    "all_reduce_gradients",
    "broadcast_buckets",
    "parse_mode",
    "partition",
    "plan_buckets",
    "record_scalar",
    "split_sizes",
    "sync_buffers",
    "sync_params",
    "verify_replicas",
    "weighted_all_reduce_gradients",
]
