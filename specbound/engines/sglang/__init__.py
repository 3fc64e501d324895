"""sglang's speculative-decoding kernels and buffers, read from an installed or unpacked release
(never imported): where the release is (:mod:`.locate`); its kernels' names and how its launch
sites launch them on a concrete batch (:mod:`.launch`); the symbolic models and host contracts
of its Triton tree build (:mod:`.tree_model`) and draft kv kernel (:mod:`.draft_kv_model`,
:mod:`.draft_kv_layout`, :mod:`.draft_kv_obligations`); the specializations its launch sites
pick over our serving envelope (:mod:`.envelope`); the audit's checks of them: kernel fuzzing
(:mod:`.tree_kernel`, :mod:`.kv_kernel`), the launch-site capacity check (:mod:`.sites`), the
symbolic proof rows (:mod:`.kernel_proofs`), the buffer audit (:mod:`.buffers`: the kernel call
sites it starts from, :mod:`.sinks`) and its replays (:mod:`.buffer_replay`), its sizing helpers
run symbolically (:mod:`.helpers`, :mod:`.claims`), the attention backends' reads of the verify
outputs (:mod:`.consumers`, :mod:`.verify_kv`, :mod:`.draft_extend`, :mod:`.expand_scatter`) and
its compiled CUDA tree build under ASan (:mod:`.cuda`); sglang's names for the spec's quantities,
handed to the engine-neutral tracer and judge (:mod:`.bindings`); and one ``specbound audit
sglang`` run (:mod:`.audit`)."""
