"""Hypothesis profiles for the test suite: ``ci`` when CI is set, else ``dev`` (see
specbound.fuzz.profiles; ``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile`` override)."""

from specbound.fuzz.profiles import load_profile

load_profile()
