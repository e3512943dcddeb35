"""Dask specialisations: blockwise calls into the per-block library's implementation."""
