"""The bench models (the Models table of ddp-bench/README.md): each defined once; ResNet-20 also
as a flodl graph."""

from ._mnist import conv_ae as conv_ae
from ._mnist import lenet as lenet
from ._mnist import logistic as logistic
from ._mnist import mlp as mlp
from ._resnet import ResNet20 as ResNet20
from ._resnet import resnet as resnet
from ._resnet import resnet_graph as resnet_graph
from ._spec import MODEL_NAMES as MODEL_NAMES
from ._spec import SPECS as SPECS
from ._spec import ModelSpec as ModelSpec
from ._text import CharRnn as CharRnn
from ._text import GptNano as GptNano

__all__ = [
    "MODEL_NAMES",
    "SPECS",
    "CharRnn",
    "GptNano",
    "ModelSpec",
    "ResNet20",
    "conv_ae",
    "lenet",
    "logistic",
    "mlp",
    "resnet",
    "resnet_graph",
]
