"""Loss functions."""

__all__: list[str] = []
