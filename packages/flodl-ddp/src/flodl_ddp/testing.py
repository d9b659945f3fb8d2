"""Aids for tests and benchmarks of distributed runs, with the engine's own rules:
:class:`Slowdown` and :data:`PAY_EVERY_S` (the hook behind ``.slowdown({rank: factor})``, also
for a plain PyTorch rank in a benchmark), :func:`cores_for`, :func:`check_bindable`,
:func:`binding_supported` (``.bind_cores()``'s slices) and :func:`check_cuda_devices` (the check
a run makes of its CUDA devices before any rank starts).
"""

from ._affinity import check_bindable, cores_for
from ._affinity import supported as binding_supported
from ._launch import check_cuda_devices
from ._slowdown import PAY_EVERY_S, Slowdown

__all__ = [
    "PAY_EVERY_S",
    "Slowdown",
    "binding_supported",
    "check_bindable",
    "check_cuda_devices",
    "cores_for",
]
