"""One entry per bench model: architecture, data, optimizer, schedule, epochs and the published
target (the README's Models table). Everything the ranks need is reached through picklable
top-level callables (``ModelFactory``, ``OptimFactory``, ``SchedFactory``, ``TrainStep``):
ranks are spawned processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from . import _mnist, _resnet, _text


@dataclass(frozen=True)
class ModelSpec:
    """A bench model.

    ``task``: ``"classify"`` (cross-entropy, eval = accuracy %), ``"lm"`` (next-character
    cross-entropy, eval = validation CE) or ``"recon"`` (MSE to the input, eval = test MSE).
    ``target``: the published eval (the README's Models table), ``None`` when it is only
    "decreasing".
    """

    name: str
    dataset: str
    architecture: str
    build: Callable[..., nn.Module]
    optimizer: str  # "adam" | "sgd" | "rmsprop"
    lr: float
    epochs: int
    task: str
    target: float | None
    schedule: str = "flat"  # "flat" | "multistep" | "warmup-cosine"
    batch_size: int = 64
    weight_decay: float = 0.0
    momentum: float = 0.0
    augment: bool = False
    takes_vocab: bool = False

    @property
    def eval_name(self) -> str:
        return {"classify": "accuracy", "lm": "val_ce", "recon": "mse"}[self.task]

    @property
    def higher_is_better(self) -> bool:
        return self.task == "classify"

    def make(self, vocab: int | None = None) -> nn.Module:
        """A freshly initialised model (``vocab``: the text models' alphabet size)."""
        if self.takes_vocab:
            return self.build(vocab if vocab is not None else _text.VOCAB)
        return self.build()


_ADAM = {"optimizer": "adam", "lr": 1e-3, "epochs": 5}

SPECS: dict[str, ModelSpec] = {
    s.name: s
    for s in (
        ModelSpec("logistic", "mnist", "Flatten(784) -> Linear(784,10)", _mnist.logistic,
                  task="classify", target=92.0, **_ADAM),
        ModelSpec("mlp", "mnist", "Linear(784,256) -> ReLU -> Linear(256,10)", _mnist.mlp,
                  task="classify", target=97.5, **_ADAM),
        ModelSpec("lenet", "mnist", "2x [Conv5x5 -> BN -> ReLU -> MaxPool2] -> 256-120-84-10",
                  _mnist.lenet, task="classify", target=99.0, **_ADAM),
        ModelSpec("resnet", "cifar10", "ResNet-20 (hand-written)", _resnet.resnet,
                  optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4, epochs=200,
                  schedule="multistep", task="classify", target=91.25, augment=True),
        ModelSpec("resnet-graph", "cifar10", "ResNet-20 (FlowBuilder, also_with)",
                  _resnet.resnet_graph, optimizer="sgd", lr=0.1, momentum=0.9,
                  weight_decay=1e-4, epochs=200, schedule="multistep", task="classify",
                  target=91.25, augment=True),
        ModelSpec("char-rnn", "shakespeare", "Embedding(V,128) -> LSTM(128,256,x2) -> Linear",
                  _text.char_rnn, optimizer="rmsprop", lr=2e-3, epochs=50, task="lm",
                  target=1.5, takes_vocab=True),
        ModelSpec("gpt-nano", "shakespeare", "4 pre-norm blocks, d 128, 4 heads, FFN 512",
                  _text.gpt_nano, optimizer="adam", lr=3e-4, epochs=50,
                  schedule="warmup-cosine", task="lm", target=2.0, takes_vocab=True),
        ModelSpec("conv-ae", "mnist", "Conv s2 x2 -> ConvT s2 x2 -> Sigmoid, MSE", _mnist.conv_ae,
                  task="recon", target=None, **_ADAM),
    )
}  # fmt: skip
"""The eight bench models by name, in the README's order."""

MODEL_NAMES: tuple[str, ...] = tuple(SPECS)
