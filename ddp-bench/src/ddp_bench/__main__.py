"""``python -m ddp_bench``."""

import sys

from ._cli import main

sys.exit(main())
