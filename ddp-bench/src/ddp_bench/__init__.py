"""ddp-bench: flodl's DDP validation harness.

Each bench model (the Models table of ddp-bench/README.md: logistic, mlp, lenet, resnet,
resnet-graph, char-rnn, gpt-nano, conv-ae) trains alone on one device and in each of flodl-ddp's
six modes (and cpu-async with DiLoCo as the outer optimizer); the runs are saved as files and
compared in a Markdown report and against a committed baseline::

    python -m ddp_bench quick                      # a smoke test of the whole harness
    python -m ddp_bench --model mlp --mode all --slowdown 1=2 --report
"""

from ._baseline import Regression as Regression
from ._baseline import compare as compare
from ._baseline import load_baseline as load_baseline
from ._baseline import save_baseline as save_baseline
from ._config import PRESETS as PRESETS
from ._config import BenchConfig as BenchConfig
from ._record import EpochRow as EpochRow
from ._record import RankTime as RankTime
from ._record import RunRecord as RunRecord
from ._record import load_records as load_records
from ._record import save_record as save_record
from ._report import SECTIONS as SECTIONS
from ._report import render as render
from ._sweep import render_sweep as render_sweep

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "SECTIONS",
    "BenchConfig",
    "EpochRow",
    "RankTime",
    "Regression",
    "RunRecord",
    "__version__",
    "compare",
    "load_baseline",
    "load_records",
    "render",
    "render_sweep",
    "save_baseline",
    "save_record",
]
