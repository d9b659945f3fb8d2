"""flodl-cli: the ``fdl`` command.

The CLI starts without importing torch (it does not even depend on it: ``fdl setup`` picks the
torch build before torch is installed); commands import the flodl packages they need lazily.
"""

from ._main import main as main

__version__ = "0.1.0"

__all__ = ["__version__", "main"]
