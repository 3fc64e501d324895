"""A serving engine's Triton kernel, read from the engine's source file by path (the engine is
never imported: it needs CUDA and a hundred packages) and defined under the interpreter, so a
replay can launch it."""

from __future__ import annotations


def load_kernel(path: str, func_name: str):
    """``func_name`` of the file at ``path`` as a ``triton.jit`` function, with the
    ``@triton.jit`` helpers of the same file it calls; compiled from the source text with
    the file's ``__future__`` flags (Triton reads the constexpr annotations), under the
    interpreter that :mod:`specbound.kernels` switches on.  Nothing else of the file runs."""
    from specbound.kernels import source  # first: sets TRITON_INTERPRET before any @triton.jit

    import triton
    import triton.language as tl

    with open(path, encoding="utf-8") as f:
        text = f.read()
    ns = {"triton": triton, "tl": tl, "__name__": f"specbound_sglang_kernels.{func_name}"}
    return source.load_jit_functions(text, path, ns, roots=[func_name])[func_name]
