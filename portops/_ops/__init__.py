"""Public front ends: one module per operation, with its signature, validation and Args record."""
