"""flodl-graph: the fluent FlowBuilder and the Graph it builds (a ``torch.nn.Module``).

::

    from flodl_graph import FlowBuilder, MergeOp
    model = (FlowBuilder(nn.Linear(2, 16)).through(nn.GELU())
             .also(nn.Linear(16, 16)).through(nn.Linear(16, 2)).build())
"""

from flodl_core import check_siblings as _check_siblings

from ._builder import FlowBuilder as FlowBuilder
from ._graph import Graph as Graph
from ._graph_traces import LossContext as LossContext
from ._spec import NODE_KINDS as NODE_KINDS
from ._spec import MergeOp as MergeOp
from ._spec import NodeInfo as NodeInfo
from ._spec import NodeKind as NodeKind
from ._subbuilders import LoopBuilder as LoopBuilder
from ._subbuilders import MapBuilder as MapBuilder
from .nodes import ArgmaxSelector as ArgmaxSelector
from .nodes import FixedSelector as FixedSelector
from .nodes import LearnedHalt as LearnedHalt
from .nodes import LoopBody as LoopBody
from .nodes import Reshape as Reshape
from .nodes import SigmoidRouter as SigmoidRouter
from .nodes import SoftmaxRouter as SoftmaxRouter
from .nodes import StateAdd as StateAdd
from .nodes import ThresholdHalt as ThresholdHalt
from .nodes import TraceEmit as TraceEmit

# --- tree / observation / visualization exports ---
# isort: split
from ._cuda_graph import CudaGraph as CudaGraph
from ._metrics import Metrics as Metrics
from ._tree import GraphTree as GraphTree
from ._tree import PathKind as PathKind
from ._trend import Reduce as Reduce
from ._trend import Trend as Trend
from ._trend import TrendGroup as TrendGroup
from .viz._graph_viz import GraphViz as GraphViz
from .viz._profile import Profile as Profile

_TREE_OBSERVE_VIZ = [
    "CudaGraph",
    "GraphTree",
    "GraphViz",
    "Metrics",
    "PathKind",
    "Profile",
    "Reduce",
    "Trend",
    "TrendGroup",
]
# --- end tree / observation / visualization exports ---

__version__ = "0.1.0"
_check_siblings("flodl-graph", __version__)

__all__ = [
    "NODE_KINDS",
    "ArgmaxSelector",
    "FixedSelector",
    "FlowBuilder",
    "Graph",
    "LearnedHalt",
    "LoopBody",
    "LoopBuilder",
    "LossContext",
    "MapBuilder",
    "MergeOp",
    "NodeInfo",
    "NodeKind",
    "Reshape",
    "SigmoidRouter",
    "SoftmaxRouter",
    "StateAdd",
    "ThresholdHalt",
    "TraceEmit",
    "__version__",
    *_TREE_OBSERVE_VIZ,
]
