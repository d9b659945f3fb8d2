"""iterative_refine: Linear(256,256)->GELU->LN, loop_body(also(Linear->GELU->LN)).for_n(8),
Linear(256,256); batch 64.

(The original: width 1024, batch 256.)
"""

from __future__ import annotations

from ._common import refine_bench

BENCH = refine_bench("iterative_refine", __doc__, d=256, steps=8, batch=64)
