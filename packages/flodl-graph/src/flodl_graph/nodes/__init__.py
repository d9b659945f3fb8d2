"""Composite nodes (loop, gate, switch, map), their emit protocol, loop traces, and the small
modules graphs commonly use."""

from ._gate import Gate as Gate
from ._halts import LearnedHalt as LearnedHalt
from ._halts import ThresholdHalt as ThresholdHalt
from ._loop import Loop as Loop
from ._map import Map as Map
from ._modules import Reshape as Reshape
from ._modules import StateAdd as StateAdd
from ._protocol import CompositeNode as CompositeNode
from ._protocol import EmitContext as EmitContext
from ._routers import ArgmaxSelector as ArgmaxSelector
from ._routers import FixedSelector as FixedSelector
from ._routers import SigmoidRouter as SigmoidRouter
from ._routers import SoftmaxRouter as SoftmaxRouter
from ._switch import Switch as Switch
from ._traces import LoopBody as LoopBody
from ._traces import TraceEmit as TraceEmit

__all__ = [
    "ArgmaxSelector",
    "CompositeNode",
    "EmitContext",
    "FixedSelector",
    "Gate",
    "LearnedHalt",
    "Loop",
    "LoopBody",
    "Map",
    "Reshape",
    "SigmoidRouter",
    "SoftmaxRouter",
    "StateAdd",
    "Switch",
    "ThresholdHalt",
    "TraceEmit",
]
