"""flodl-ddp: heterogeneous data-parallel training on ``torch.distributed``.

Devices of different speeds train one model together: ElChe sets how many batches each rank runs
between averagings (the slowest rank anchors the cadence, faster ranks run proportionally more),
parameters are averaged weighted by batch counts, convergence guards hold the cadence back when
replicas drift apart, and outer optimizers (SlowMo, DiLoCo) turn each averaging into a step.

The bypass tier, over a process group you initialised yourself::

    from flodl_ddp import all_reduce_gradients, sync_params

    sync_params(model)
    ...
    loss.backward()
    all_reduce_gradients(model)
"""

from flodl_core import check_siblings

from ._admission import admit as admit
from ._buckets import all_reduce_buckets as all_reduce_buckets
from ._buckets import broadcast_buckets as broadcast_buckets
from ._buckets import plan_buckets as plan_buckets
from ._bypass import all_reduce_gradients as all_reduce_gradients
from ._bypass import sync_buffers as sync_buffers
from ._bypass import sync_params as sync_params
from ._bypass import verify_replicas as verify_replicas
from ._bypass import weighted_all_reduce_gradients as weighted_all_reduce_gradients
from ._config import DdpConfig as DdpConfig
from ._config import TrainerConfig as TrainerConfig
from ._elastic import ElasticOptions as ElasticOptions
from ._elastic_launch import ElasticHandle as ElasticHandle
from ._elche import ElChe as ElChe
from ._elche import Phase as Phase
from ._elche_config import ElCheConfig as ElCheConfig
from ._errors import DdpError as DdpError
from ._guards import ActionKind as ActionKind
from ._guards import ConvergenceAction as ConvergenceAction
from ._guards import ConvergenceGuard as ConvergenceGuard
from ._guards import DivergenceReport as DivergenceReport
from ._guards import MsfGuard as MsfGuard
from ._guards import NoGuard as NoGuard
from ._guards import TrendGuard as TrendGuard
from ._handle import DdpHandle as DdpHandle
from ._handle import TrainedState as TrainedState
from ._meta import MetaController as MetaController
from ._metrics import EpochMetrics as EpochMetrics
from ._metrics import Progress as Progress
from ._metrics import RankMetrics as RankMetrics
from ._metrics import record_scalar as record_scalar
from ._modes import MODES as MODES
from ._modes import Backend as Backend
from ._modes import Mode as Mode
from ._modes import Policy as Policy
from ._modes import parse_mode as parse_mode
from ._outer import DiLoCo as DiLoCo
from ._outer import OuterAvg as OuterAvg
from ._outer import OuterOptimizer as OuterOptimizer
from ._outer import SlowMo as SlowMo
from ._outer import TorchOuter as TorchOuter
from ._partition import Partition as Partition
from ._partition import partition as partition
from ._partition import split_sizes as split_sizes
from ._session import DdpSession as DdpSession
from ._timeline import Timeline as Timeline
from ._timeline import TimelineEvent as TimelineEvent
from ._timeline import TimelineSample as TimelineSample
from ._timeline import TimelineSpan as TimelineSpan
from ._trainer import Trainer as Trainer
from ._trainer import TrainerBuilder as TrainerBuilder

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
