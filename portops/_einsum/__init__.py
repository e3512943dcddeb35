"""einsum machinery: parsing, path choice, lowering to primitive steps, execution."""
