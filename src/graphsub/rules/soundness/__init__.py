"""Rule soundness: is a substitution rule correct?  Numeric checks on concrete instantiations
(``numeric``), TASO's operator axioms checked on concrete tensors (``axioms``), and Z3 proofs of
rules from them (``smt``).

(:mod:`graphsub.equivalence` is something else: numeric equivalence of two whole models.)"""
