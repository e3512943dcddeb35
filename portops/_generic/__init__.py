"""Reference implementations written against the array API standard only."""
