"""specbound.sglang: checked drop-ins with sglang's own call syntax.

* :func:`build_tree_kernel_efficient` takes sglang's tree-build op's twelve arguments, in
  its order, and writes its five buffers in place, as the op does.
* :data:`generate_draft_decode_kv_indices` is launched like sglang's Triton kernel,
  ``generate_draft_decode_kv_indices[grid](...)``, with its arguments.

Each checks every precondition of the spec on the buffers it is handed, raising a
``ValueError`` (:class:`~specbound.spec.SpecArgumentError`) that names the buffer, the
numbers and the spec condition, before anything is written; then it writes exactly the
cells sglang's kernel writes (``tests/test_sglang_dropin_kv.py`` and ``..._tree.py``
compare them with sglang's own kernels on the same launches).  They are for tests, not serving: the writes are plain
PyTorch on the host's view of the buffers (any device), with a host sync to check them.

The swap, in a test of an sglang engineer (sglang must be importable, i.e. a machine
with its dependencies; on sglang's CUDA/ROCm path)::

    from sglang.kernels.ops.speculative import spec_tree            # 0.5.23
    monkeypatch.setattr(spec_tree, "sgl_build_tree_kernel_efficient",
                        specbound.sglang.build_tree_kernel_efficient)

Signatures per release (read from the wheels of 0.5.3, 0.5.12.post1, 0.5.17, 0.5.20 and
the installed 0.5.23; the releases between them were not opened):

* sglang's caller passes the tree op the same twelve positional arguments, in the same
  order, in every one of them (the op of the older releases lives in ``sgl_kernel``, whose
  wheels were not opened); what moved is the module and the name the caller looks up at
  call time, the attribute to patch: ``sglang.srt.speculative.build_eagle_tree.sgl_build_tree_kernel_efficient``
  (0.5.3, the op from ``sgl_kernel``), ``sglang.srt.speculative.eagle_utils.sgl_build_tree_kernel_efficient``
  (0.5.12.post1 to 0.5.20, from ``sgl_kernel``), ``sglang.kernels.ops.speculative.spec_tree.sgl_build_tree_kernel_efficient``
  (0.5.23, a JIT-compiled op of sglang itself).  The ``(3, bs, n)`` retrive buffer passed as
  three views appears by 0.5.12.post1 (0.5.3 allocates three tensors).
* The kv kernel: 0.5.3 to 0.5.17 take 13 arguments, the 7th ``pool_len`` (a constexpr, the
  ``req_to_token`` row width); 0.5.20 adds ``NUM_STEPS`` (token blocks on grid axis 0); 0.5.23
  renames the 7th ``row_stride`` (a runtime value, same meaning) and adds ``window_size``,
  ``sink_size``, ``ENTRY_PAGE_SIZE``, ``v2p`` and ``TRANSLATE``.  The drop-in takes 0.5.23's
  arguments; a positional call of an older release means the same.  Only the pristine read
  plan is modelled (``window_size = 0``, ``ENTRY_PAGE_SIZE = 1``, no ``v2p``/``TRANSLATE``);
  any other value is refused by name.
"""

from .draft_kv import generate_draft_decode_kv_indices
from .tree import build_tree_kernel_efficient

__all__ = ["build_tree_kernel_efficient", "generate_draft_decode_kv_indices"]
