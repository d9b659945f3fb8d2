"""flodl-monitor: a training monitor with a live dashboard.

::

    from flodl_monitor import Monitor

    monitor = Monitor(num_epochs)
    monitor.serve(3000)                  # optional: http://127.0.0.1:3000
    for epoch in range(num_epochs):
        t = time.perf_counter()
        ...                              # train
        monitor.log(epoch, time.perf_counter() - t, {"loss": loss})
    monitor.finish()
    monitor.save_html("report.html")     # one offline file
"""

from flodl_core import check_siblings

from ._alerts import Alert as Alert
from ._alerts import LossWatch as LossWatch
from ._export import csv_text as csv_text
from ._export import log_text as log_text
from ._format import epoch_line as epoch_line
from ._format import finish_line as finish_line
from ._format import format_bytes as format_bytes
from ._format import format_eta as format_eta
from ._format import format_metric as format_metric
from ._identity import ModelIdentity as ModelIdentity
from ._monitor import EpochRecord as EpochRecord
from ._monitor import Monitor as Monitor
from ._recordlog import RecordLog as RecordLog
from ._recordlog import load_record_log as load_record_log
from ._records import Record as Record
from ._records import RecordTree as RecordTree
from ._resources import GpuSample as GpuSample
from ._resources import ResourceSample as ResourceSample
from ._resources import ResourceSampler as ResourceSampler
from ._server import DashboardServer as DashboardServer
from ._server import make_app as make_app
from ._timeline import Timeline as Timeline
from ._timeline import TimelineEvent as TimelineEvent
from ._timeline import TimelineSample as TimelineSample
from ._timeline import TimelineSpan as TimelineSpan

__version__ = "0.1.0"
check_siblings("flodl-monitor", __version__)

__all__ = [
    "Alert",
    "DashboardServer",
    "EpochRecord",
    "GpuSample",
    "LossWatch",
    "ModelIdentity",
    "Monitor",
    "Record",
    "RecordLog",
    "RecordTree",
    "ResourceSample",
    "ResourceSampler",
    "Timeline",
    "TimelineEvent",
    "TimelineSample",
    "TimelineSpan",
    "__version__",
    "csv_text",
    "epoch_line",
    "finish_line",
    "format_bytes",
    "format_eta",
    "format_metric",
    "load_record_log",
    "log_text",
    "make_app",
]
