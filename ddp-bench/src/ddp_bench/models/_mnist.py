"""The MNIST models of the bench: logistic, mlp, lenet (classifiers) and conv-ae (autoencoder).

Every model takes images ``(B, 1, 28, 28)`` in [0, 1]; the classifiers return logits
``(B, 10)``, the autoencoder a reconstruction ``(B, 1, 28, 28)`` in [0, 1].
"""

from __future__ import annotations

from torch import nn


def logistic() -> nn.Module:
    """Flatten(784) -> Linear(784, 10): multinomial logistic regression."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


def mlp() -> nn.Module:
    """Flatten(784) -> Linear(784, 256) -> ReLU -> Linear(256, 10)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def lenet() -> nn.Module:
    """LeNet-5 with batch norm: two conv(5x5)->BN->ReLU->MaxPool2 stages, then 256->120->84->10.

    Spatial sizes: 28 -> 24 -> 12 -> 8 -> 4, so the flattened features are 16 x 4 x 4 = 256.
    """
    return nn.Sequential(
        nn.Conv2d(1, 6, 5),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


def conv_ae() -> nn.Module:
    """Convolutional autoencoder: 28 -> 14 -> 7 (32 channels) -> 14 -> 28, sigmoid output."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1),
        nn.ReLU(),
        nn.ConvTranspose2d(16, 1, 3, stride=2, padding=1, output_padding=1),
        nn.Sigmoid(),
    )
