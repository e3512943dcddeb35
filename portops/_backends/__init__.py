"""Per-library specialisations, imported lazily by the dispatcher."""
