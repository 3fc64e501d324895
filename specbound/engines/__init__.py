"""Serving engines other than sglang whose Triton kernels are proved from their released
source text (never imported)."""
