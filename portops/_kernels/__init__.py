"""CUDA C kernel sources, the loader that reads them, and the index geometry they share."""
