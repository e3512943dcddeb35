"""Per-library specialisations, one package per library, each imported on the first
dispatch of that library's arrays. Which package serves which library is said by the
backend descriptors registered in ``portops._arrays``."""
