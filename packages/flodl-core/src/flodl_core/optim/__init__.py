"""Optimizers with parameter-group builders, schedulers, clipping."""

__all__: list[str] = []
