"""Rule verification: numeric checks on concrete instantiations (``numeric``), TASO's operator
axioms checked on concrete tensors (``axioms``), and Z3 proofs of rules from them (``smt``)."""
