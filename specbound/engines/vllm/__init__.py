"""vLLM's speculative-decoding Triton kernels: where they live in a release's source tree
(:mod:`.locate`), their host contracts read from the launch sites (:mod:`.contract`), their
symbolic launches (:mod:`.models`), the proofs and refutations (:mod:`.prove`), replays on
the real kernel under the checked interpreter (:mod:`.replay`) and ``specbound audit vllm``
(:mod:`.audit`).  vLLM is never imported: it needs CUDA and a hundred packages."""
