"""The ``.fdl`` checkpoint format and optimizer state files."""

__all__: list[str] = []
