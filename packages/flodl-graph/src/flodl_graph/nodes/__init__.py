"""Composite nodes (loop, gate, switch, map) and the small modules graphs commonly use."""

from ._gate import Gate as Gate
from ._halts import LearnedHalt as LearnedHalt
from ._halts import ThresholdHalt as ThresholdHalt
from ._loop import Loop as Loop
from ._map import Map as Map
from ._modules import Reshape as Reshape
from ._modules import StateAdd as StateAdd
from ._routers import ArgmaxSelector as ArgmaxSelector
from ._routers import FixedSelector as FixedSelector
from ._routers import SigmoidRouter as SigmoidRouter
from ._routers import SoftmaxRouter as SoftmaxRouter
from ._switch import Switch as Switch

__all__ = [
    "ArgmaxSelector",
    "FixedSelector",
    "Gate",
    "LearnedHalt",
    "Loop",
    "Map",
    "Reshape",
    "SigmoidRouter",
    "SoftmaxRouter",
    "StateAdd",
    "Switch",
    "ThresholdHalt",
]
