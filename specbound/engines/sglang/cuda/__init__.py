"""sglang's CUDA kernels on the CPU, under AddressSanitizer and UndefinedBehaviorSanitizer.

For kernels whose threads never wait on or read from each other (no shared memory,
barriers, warp intrinsics or atomics): :mod:`.source` reads the kernel file by structure
and bounds its loops, :mod:`.build` compiles it with :file:`shim.hpp` (g++,
``-fsanitize=address,undefined``, cached by source hash), :mod:`.harness` runs launches in
a sanitized child process (:mod:`.child`), :mod:`.tree` checks the tree build against the
spec and the reference, :mod:`.probes` holds the malformed trees, :mod:`.offsets` the
int32 wrap bounds, and :mod:`.check` turns it all into audit rows.  :mod:`.replay` re-runs
one case from the command line.  Nothing here imports sglang.
"""
