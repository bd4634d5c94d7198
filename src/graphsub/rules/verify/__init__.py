"""Rule verification: numeric checks on concrete instantiations (``numeric``)."""
