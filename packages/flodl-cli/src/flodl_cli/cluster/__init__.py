"""The cluster controller behind ``fdl @cluster``: the cluster file, ssh fan-out, readiness probe.

Torch-free: the controller machine needs only flodl-cli (and pyyaml); every worker runs
flodl-ddp's node agent (``python -m flodl_ddp._cluster_node``), which starts torchrun there, and
its ranks prove the run's token through ``flodl_ddp.admit`` before training.

::

    from flodl_cli.cluster import ClusterBuilder, ClusterConfig, probe_cluster, run_cluster

    cluster = ClusterConfig.load("fdl.cluster.yml")          # or ClusterBuilder()...build()
    report = probe_cluster(cluster)                          # reachable, versions, data, ...
    code = run_cluster(cluster, ["python", "train.py"])      # 0, or the first failure's code
"""

from ._builder import ClusterBuilder as ClusterBuilder
from ._builder import ClusterLike as ClusterLike
from ._config import ClusterConfig as ClusterConfig
from ._config import ClusterConfigError as ClusterConfigError
from ._config import ControllerConfig as ControllerConfig
from ._config import SshTarget as SshTarget
from ._config import WorkerConfig as WorkerConfig
from ._config import find_cluster_file as find_cluster_file
from ._launch import NodeLaunch as NodeLaunch
from ._launch import plan as plan
from ._launch import run_cluster as run_cluster
from ._probe import HostReport as HostReport
from ._probe import ProbeReport as ProbeReport
from ._probe import probe_cluster as probe_cluster
from ._transport import LocalTransport as LocalTransport
from ._transport import Spawn as Spawn
from ._transport import SshTransport as SshTransport
from ._transport import Transport as Transport

__all__ = [
    "ClusterBuilder",
    "ClusterConfig",
    "ClusterConfigError",
    "ClusterLike",
    "ControllerConfig",
    "HostReport",
    "LocalTransport",
    "NodeLaunch",
    "ProbeReport",
    "Spawn",
    "SshTarget",
    "SshTransport",
    "Transport",
    "WorkerConfig",
    "find_cluster_file",
    "plan",
    "probe_cluster",
    "run_cluster",
]
