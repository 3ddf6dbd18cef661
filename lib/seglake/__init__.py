"""seglake."""
