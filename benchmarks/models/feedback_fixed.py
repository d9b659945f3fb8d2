"""feedback_fixed: Linear(128,128)->GELU->LN, loop_body(also(Linear->GELU->LN)).for_n(10),
Linear(128,128); batch 32.

(The original: width 512, batch 128.)
"""

from __future__ import annotations

from ._common import refine_bench

BENCH = refine_bench("feedback_fixed", __doc__, d=128, steps=10, batch=32)
