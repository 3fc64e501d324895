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

Signatures per release, read from the wheels of 0.5.3, 0.5.6, 0.5.9, 0.5.12.post1, 0.5.17 to
0.5.22 and the installed 0.5.23 (``pip download --no-deps``; a range holds for the releases
of it that were read):

Tree op, the name its caller looks up at call time (the attribute to patch):

* 0.5.3: ``sglang.srt.speculative.build_eagle_tree.sgl_build_tree_kernel_efficient`` (the op
  from ``sgl_kernel``), three separate retrive tensors;
* 0.5.6 (or earlier: 0.5.4 and 0.5.5 were not read) to 0.5.22:
  ``sglang.srt.speculative.eagle_utils.sgl_build_tree_kernel_efficient`` (from ``sgl_kernel``),
  one ``(3, bs, n)`` retrive buffer passed as three views;
* 0.5.23: ``sglang.kernels.ops.speculative.spec_tree.sgl_build_tree_kernel_efficient``
  (sglang's own JIT op, ``kernels/ops/speculative/tree.py``).

Draft kv kernel, its arguments:

* 0.5.3 to 0.5.19: 13, the 7th ``pool_len`` (a constexpr, the ``req_to_token`` row width);
* 0.5.20: + ``NUM_STEPS`` (token blocks on grid axis 0);
* 0.5.21: + ``window_size``, ``sink_size`` (14th and 15th);
* 0.5.22 and 0.5.23: the 7th renamed ``row_stride`` (a runtime value, same meaning),
  + ``ENTRY_PAGE_SIZE``, ``v2p``, ``TRANSLATE``.

The caller passes the tree op the same twelve arguments, positionally and in the same order,
in every release read (the op of the releases before 0.5.23 lives in ``sgl_kernel``, whose
wheels were not opened).  The kv kernel's arguments only grew, at the end or as defaulted
constexprs, and its 7th kept its meaning, so a positional call of any release read means the
same to the drop-in, which takes 0.5.23's names.  The kernel itself is in
``srt/speculative/spec_utils.py`` up to 0.5.12.post1 and in
``kernels/ops/speculative/cache_locs.py`` from 0.5.17.  Only the pristine read plan is modelled
(``window_size = 0``, ``ENTRY_PAGE_SIZE = 1``, no ``v2p``/``TRANSLATE``); any other value is
refused by name.
"""

from .draft_kv import generate_draft_decode_kv_indices
from .tree import build_tree_kernel_efficient

__all__ = ["build_tree_kernel_efficient", "generate_draft_decode_kv_indices"]
