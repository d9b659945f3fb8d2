"""The nn catalogue: torch's own modules re-exported under flodl's names, plus what torch lacks."""

__all__: list[str] = []
