"""specbound: model-checked buffer-sizing invariants of EAGLE speculative decoding.

Subpackages: ``specbound.spec`` (formulas), ``specbound.proofs`` (Z3 theorems),
``specbound.reference`` (plain implementation), ``specbound.kernels`` (Triton).
"""

__version__ = "0.1.0"
