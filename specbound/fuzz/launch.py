"""Raw kernel launches (no host validation) and kernel variants built from the kernels' source.

The wrappers in :mod:`specbound.kernels` validate every size before launching, so a too
small buffer never reaches a kernel through them.  The mutant replays and the CUDA-graph
state machine model a caller that *does* launch with its own sizing (a captured graph
replays without host checks), so they launch the same ``@triton.jit`` kernels directly,
with the grid and block sizes the wrappers would choose.  Inside ``checked_interpreter``
an access outside the given buffers raises ``OutOfBoundsAccess``.

Kernel variants: :func:`tree_kernel_variant` re-creates ``build_tree_kernel`` from its
own source with one text substitution (the historical bug of a proof mutant planted in
our kernel), registered in ``linecache`` so Triton can read it.  The kernels module
offers no variants itself; if its source changes so a pattern no longer matches,
:class:`VariantUnavailable` says which.
"""

from __future__ import annotations

import inspect
import linecache
import textwrap

from specbound import kernels, spec  # first: it sets TRITON_INTERPRET before triton is imported

import torch  # noqa: E402

from specbound.kernels import draft_kv as kv_mod  # noqa: E402
from specbound.kernels import tree_build as tb  # noqa: E402


class VariantUnavailable(RuntimeError):
    """The kernel source no longer contains the text a variant rewrites."""


def tree_outputs(bs: int, n: int) -> dict[str, torch.Tensor]:
    """Exact-size positions / retrive_* buffers (what the caller allocates)."""
    return {"positions": torch.zeros(spec.token_numel(bs, n), dtype=torch.int64),
            **{name: torch.full((bs, n), -1, dtype=torch.int64)
               for name in ("retrive_index", "retrive_next_token", "retrive_next_sibling")}}


def launch_tree_raw(parent_list, selected_index, seq_lens, tree_mask, *, topk, depth, num_draft_tokens, mode,
                    fill_prefix_mask=True, outputs=None, kernel=None):
    """Launch the tree build as ``kernels.build_tree`` would, minus its checks: ``tree_mask``
    is used as given, whatever its size.  Returns the outputs dict."""
    outputs = outputs if outputs is not None else tree_outputs(int(seq_lens.shape[0]), num_draft_tokens)
    tb.launch_tree(parent_list, selected_index, seq_lens, tree_mask, outputs["positions"], outputs["retrive_index"],
                   outputs["retrive_next_token"], outputs["retrive_next_sibling"], topk=topk, depth=depth,
                   num_draft_tokens=num_draft_tokens, mode=mode, fill_prefix_mask=fill_prefix_mask, kernel=kernel)
    return {"tree_mask": tree_mask, **outputs}


def launch_kv_raw(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, *, topk, num_steps,
                  page_size=1):
    """Launch the draft kv kernel as ``kernels.draft_decode_kv_indices`` would, minus its
    checks (no capacity check against the row width)."""
    kv_mod.launch_kv(req_pool_indices, req_to_token, seq_lens, kv_indices, kv_indptr, topk=topk,
                     num_steps=num_steps, page_size=page_size)
    return kv_indices, kv_indptr


# --- kernel variants -----------------------------------------------------------------------------

# variant name -> (mutant it plants, [(text in build_tree_kernel, replacement)])
TREE_VARIANTS = {
    # sglang's CUDA kernel scans n entries of the (n-1)-entry selected_index row.
    "search-past-row": ("MUT-SEARCH-PAST-ROW", [
        ("ent_ok2 = req2 & (node2 < sel_width)", "ent_ok2 = req2 & (node2 < n)"),
        ("& (j3 < sel_width)", "& (j3 < n)"),
    ]),
    # sglang's CUDA walk is while(true); the interpreter cannot run forever, so the walk
    # runs NODES + DEPTH steps instead of DEPTH (enough to go round any cycle of the tile).
    "walk-past-depth": ("MUT-UNBOUNDED-WALK", [
        ("for _step in tl.static_range(DEPTH):", "for _step in tl.static_range(DEPTH + NODES):"),
    ]),
}

_variant_cache: dict[str, object] = {}


def tree_kernel_variant(name: str):
    """``build_tree_kernel`` with the substitutions of ``TREE_VARIANTS[name]``."""
    if name in _variant_cache:
        return _variant_cache[name]
    if name not in TREE_VARIANTS:
        raise KeyError(f"unknown kernel variant {name!r}; known: {', '.join(TREE_VARIANTS)}")
    if not kernels.INTERPRETED:
        raise VariantUnavailable("kernel variants are only built for the interpreter")
    fn = getattr(tb.build_tree_kernel, "fn", None)
    if fn is None:
        raise VariantUnavailable("build_tree_kernel has no .fn (unexpected Triton JITFunction layout)")
    src = textwrap.dedent(inspect.getsource(fn))
    for old, new in TREE_VARIANTS[name][1]:
        if old not in src:
            raise VariantUnavailable(f"variant {name}: build_tree_kernel no longer contains {old!r}")
        src = src.replace(old, new)
    # The variant keeps the kernel's name (it is defined in a copy of the module's namespace,
    # so the real kernel is untouched): the checked interpreter records writes by kernel
    # name, and a footprint check must compare the variant's writes, not find none.
    filename = f"<specbound.fuzz variant {name}>"
    lines = src.splitlines(keepends=True)
    linecache.cache[filename] = (len(src), None, lines, filename)
    namespace = dict(vars(tb))
    exec(compile(src, filename, "exec"), namespace)  # noqa: S102 - our own kernel's text, rewritten
    kernel = namespace["build_tree_kernel"]
    _variant_cache[name] = kernel
    return kernel
