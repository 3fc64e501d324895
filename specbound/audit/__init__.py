"""Audit an installed sglang (without importing it) against the spec."""

# The default budget of an audit run: random batches per kernel check, and their seed.  Here,
# not in .run, so that the command line reads them without loading every check.
DEFAULT_EXAMPLES = 40
DEFAULT_SEED = 20240607
