"""One launch plan per kernel: the grid, the arguments by parameter name and the constexprs
of ``build_tree_kernel`` (:func:`tree_plan`), ``fill_prefix_kernel`` (:func:`fill_plan`) and
``draft_kv_kernel`` (:func:`kv_plan`).

Every size is computed through ``spec`` functions, so the same plan evaluates on ints (the
launch wrappers, the replays, the self-check tests) and on Z3 terms (the symbolic host
contract of ``proofs/symexec/models.py``): a change to a wrapper's grid or argument list is a
change the proofs see.  This module imports only ``spec`` (no torch, no triton), so the
symbolic proofs read it without the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbound import spec


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple        # programs per grid axis
    args: dict         # kernel parameter name -> tensor or runtime scalar
    constexprs: dict   # constexpr parameter name -> value

    def launch(self, kernel) -> None:
        """``kernel[grid](**args, **constexprs)``: arguments bind by name, so a plan whose
        names drift from the kernel's parameters fails at the launch, not silently."""
        kernel[self.grid](**self.args, **self.constexprs)


def tensor_args(names: tuple, tensors: dict) -> dict:
    """The pointer arguments ``names`` from ``tensors`` (keyed by parameter name), in order;
    a missing one is named."""
    missing = [n for n in names if n not in tensors]
    if missing:
        raise KeyError(f"launch plan: no tensor for kernel parameter(s) {', '.join(missing)}")
    return {n: tensors[n] for n in names}


TREE_TENSORS = ("parent_list_ptr", "selected_index_ptr", "seq_lens_ptr", "prefix_ptr", "tree_mask_ptr",
                "positions_ptr", "retrive_index_ptr", "next_token_ptr", "next_sibling_ptr")
FILL_TENSORS = ("tree_mask_ptr", "seq_lens_ptr", "prefix_ptr")


def tree_plan(tensors: dict, *, bs, topk, depth, n, mode, block_b: int, nodes: int) -> LaunchPlan:
    """``build_tree_kernel``'s launch: one program per ``block_b`` requests; the row widths and
    the walk bound from the spec."""
    return LaunchPlan(
        grid=(spec.cdiv(bs, block_b),),
        args={**tensor_args(TREE_TENSORS, tensors), "bs": bs, "topk": topk,
              "pl_width": spec.parent_list_width(topk, depth), "sel_width": spec.selected_index_width(n), "n": n},
        constexprs={"MODE": int(mode), "DEPTH": spec.walk_max_steps(depth), "BLOCK_B": block_b, "NODES": nodes})


def fill_plan(tensors: dict, *, bs, n, block_b: int, nodes: int, block_c: int) -> LaunchPlan:
    """``fill_prefix_kernel``'s launch: one program per ``block_b`` requests."""
    return LaunchPlan(grid=(spec.cdiv(bs, block_b),), args={**tensor_args(FILL_TENSORS, tensors), "bs": bs, "n": n},
                      constexprs={"BLOCK_B": block_b, "NODES": nodes, "BLOCK_C": block_c})


KV_TENSORS = ("req_pool_indices_ptr", "req_to_token_ptr", "seq_lens_ptr", "prefix_ptr", "kv_indices_ptr",
              "kv_indptr_ptr")


def kv_plan(tensors: dict, *, num_seqs, topk, num_steps, page_size, width, indptr_stride, r2t_stride0,
            r2t_stride1, block_b: int, pairs: int, steps: int, block_c: int) -> LaunchPlan:
    """``draft_kv_kernel``'s launch: one program per ``block_b`` requests; ``width`` and
    ``indptr_stride`` are the row widths of kv_indices and kv_indptr, ``r2t_stride*``
    req_to_token's strides."""
    return LaunchPlan(
        grid=(spec.cdiv(num_seqs, block_b),),
        args={**tensor_args(KV_TENSORS, tensors), "num_seqs": num_seqs, "topk": topk, "num_steps": num_steps,
              "page_size": page_size, "width": width, "indptr_stride": indptr_stride,
              "r2t_stride0": r2t_stride0, "r2t_stride1": r2t_stride1},
        constexprs={"BLOCK_B": block_b, "PAIRS": pairs, "STEPS": steps, "BLOCK_C": block_c})
