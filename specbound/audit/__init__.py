"""Audit an installed sglang (without importing it) against the spec."""
