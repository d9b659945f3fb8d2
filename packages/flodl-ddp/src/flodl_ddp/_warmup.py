"""A device's one-off start-up costs (cuBLAS and cuDNN handles, autograd's device thread: half a
second or more, ARCHITECTURE-NOTES.md ``_warmup``), paid before the ranks' start barrier so
that neither epoch 0's clock nor ElChe's view of the rank's speed includes them.
"""

from __future__ import annotations

import torch
from torch import nn

_CUDNN_MODULES = (nn.modules.conv._ConvNd, nn.modules.rnn.RNNBase, nn.modules.batchnorm._NormBase)


def warm_up(device: torch.device, model: nn.Module) -> None:
    """Create ``device``'s cuBLAS handle, autograd thread and, when ``model`` has a module that
    runs on cuDNN, the cuDNN handle. No randomness is drawn and ``model`` is not run; a few
    bytes of memory. A no-op on the CPU, which has none of them."""
    if device.type != "cuda":
        return
    a = torch.ones(8, 8, device=device, requires_grad=True)
    (a @ a).sum().backward()
    if torch.backends.cudnn.enabled and any(isinstance(m, _CUDNN_MODULES) for m in model.modules()):
        x = torch.ones(1, 1, 4, 4, device=device, requires_grad=True)
        w = torch.ones(1, 1, 3, 3, device=device)
        torch.nn.functional.conv2d(x, w).sum().backward()
    torch.cuda.synchronize(device)
