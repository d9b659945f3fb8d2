"""Data loading: DataLoader (resident and streaming) and dataset parsers."""

__all__: list[str] = []
