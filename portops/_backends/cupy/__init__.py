"""CuPy specialisations (each module registers the implementations it defines)."""
