"""Symbolic execution of the Triton kernels against a Z3 stand-in for triton.language."""
