"""Visualization and profiling: DOT, SVG, profile heat maps, HTML plots."""
