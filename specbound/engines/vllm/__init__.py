"""vLLM's speculative-decoding Triton kernels: where they live in a release's source tree
(:mod:`.locate`), their host contracts read from the launch sites (:mod:`.contract`), older
releases' signatures (:mod:`.releases`), their symbolic launches (:mod:`.models`), the proofs
and refutations (:mod:`.prove`, :mod:`.refute`), replays on the real kernel under the checked
interpreter (:mod:`.replay`), ``specbound audit vllm`` (:mod:`.audit`) and the release matrix
(:mod:`.matrix`).  vLLM is never imported: it needs CUDA and a hundred packages."""
