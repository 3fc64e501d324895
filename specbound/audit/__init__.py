"""The engine-neutral audit core: an engine's release read as source (never imported), traced
and judged against the spec with what the engine's adapter hands in
(:mod:`specbound.engines`)."""

# The default budget of an audit run: random batches per kernel check, and their seed.  Here,
# not in .run, so that the command line reads them without loading every check.
DEFAULT_EXAMPLES = 40
DEFAULT_SEED = 20240607
