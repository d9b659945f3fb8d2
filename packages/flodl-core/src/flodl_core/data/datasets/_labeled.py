"""The shape both image sets share: fields ``images: (N, C, H, W)`` and ``labels: (N,)``."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from ..._errors import ShapeError
from .._dataset import TensorDataSet


class LabeledImages(TensorDataSet):
    """A :class:`TensorDataSet` of two fields, ``image`` and ``label`` (one class per image).

    A :class:`DataLoader` names them by default (``batch["image"]``, ``batch["label"]``);
    ``image, label = ds[i]`` reads one sample, so the set also feeds ``torch``'s own
    ``DataLoader``. A subclass checks its own image shape, then calls ``super().__init__``,
    which checks the labels; ``NAME`` names the set in errors.
    """

    NAME: ClassVar[str] = "image set"
    field_names = ("image", "label")

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        if labels.dim() != 1:
            raise ShapeError(f"{self.NAME} labels must be (N,), got {tuple(labels.shape)}")
        super().__init__(images, labels)

    @property
    def images(self) -> Tensor:
        return self.tensors[0]

    @property
    def labels(self) -> Tensor:
        return self.tensors[1]
