"""Loss functions: thin, checked front-ends to ``torch.nn.functional`` plus focal loss.

Each validates its arguments from shape metadata only (no device sync) and raises
:class:`~flodl_core.ShapeError` / :class:`~flodl_core.ConfigError` naming the argument at fault,
where torch would broadcast silently or fail deep in a kernel. Defaults follow PyTorch except
:func:`kl_div_loss` (``"batchmean"``).
"""

from ._classification import bce_loss as bce_loss
from ._classification import bce_with_logits_loss as bce_with_logits_loss
from ._classification import cross_entropy as cross_entropy
from ._classification import cross_entropy_loss as cross_entropy_loss
from ._classification import focal_loss as focal_loss
from ._classification import kl_div_loss as kl_div_loss
from ._classification import nll_loss as nll_loss
from ._embedding import cosine_embedding_loss as cosine_embedding_loss
from ._embedding import hinge_embedding_loss as hinge_embedding_loss
from ._embedding import margin_ranking_loss as margin_ranking_loss
from ._embedding import triplet_margin_loss as triplet_margin_loss
from ._regression import l1_loss as l1_loss
from ._regression import mse_loss as mse_loss
from ._regression import poisson_nll_loss as poisson_nll_loss
from ._regression import smooth_l1_loss as smooth_l1_loss
from ._sequence import ctc_loss as ctc_loss

__all__ = [
    "bce_loss",
    "bce_with_logits_loss",
    "cosine_embedding_loss",
    "cross_entropy",
    "cross_entropy_loss",
    "ctc_loss",
    "focal_loss",
    "hinge_embedding_loss",
    "kl_div_loss",
    "l1_loss",
    "margin_ranking_loss",
    "mse_loss",
    "nll_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "triplet_margin_loss",
]
