"""sglang's speculative-decoding kernels (placeholder; described in the next commit)."""
