"""The global options of this ``fdl`` call, for commands that need them."""

from __future__ import annotations

env: str | None = None  # --env / @env / FDL_ENV
gpus: str | None = None  # --gpus as typed ("all", "0,1")
