"""Differential fuzzing of spec vs reference vs Triton kernels (Hypothesis)."""
