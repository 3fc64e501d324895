"""Replay a buffer counterexample on sglang's own kernel, into a buffer of exactly the size
sglang allocates, under the checked interpreter: the ``OutOfBoundsAccess`` is the evidence.

* ``draft_kv_indices``: sglang's ``generate_draft_decode_kv_indices`` (every release has
  it), grid ``(num_steps, bs, topk)``, the kv_indices buffer ``(rows, width)`` as allocated.
* ``tree_mask``: sglang's Triton tree build (``sgl_build_tree_kernel_efficient_triton``)
  when the release has one; older releases ship only the CUDA op (sgl-kernel), which needs
  a GPU, so the replay runs specbound's own Triton tree build, whose write footprint is
  the spec's (``docs/kernel-proofs.md``), and the row says so.

One-line replay::

    python -m specbound.engines.sglang.buffer_replay --sglang-path DIR --kernel draft_kv_indices --case '{...}'
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys

from specbound import spec
from specbound.replay import Replay

from specbound.audit import kernels
from . import kv_kernel, tree_kernel
from .launch import KV_ALIASES, KV_FILES, KV_KERNEL, TREE_ALIASES, TREE_FILES, TREE_KERNEL
from specbound.audit.report import DIVERGED, ERROR, OOB
from specbound.audit.extract import SourceIndex
from specbound.audit.judge import seq_lens_for
from .locate import NotInstalled, locate


def kv_case(values: dict, rows: int, width: int) -> dict:
    """A replay case from a counterexample: the batch and the buffer's shape."""

    cap = values["max_context_len"] - values["num_steps"]   # the kv kernel's contract: draft room
    return {"topk": values["topk"], "num_steps": values["num_steps"], "page_size": 1,
            "seq_lens": seq_lens_for(values, max(cap, 0)), "max_context_len": values["max_context_len"],
            "slot_seed": 0, "rows": rows, "width": width}


def tree_case(values: dict, mode, numel: int, cap: int) -> dict | None:
    """A replay case: valid draft trees for the counterexample's shape, ``numel`` mask cells."""
    from specbound.reference.samples import random_tree_batch

    seq = seq_lens_for(values, cap)
    if seq is None:
        return None
    k, d, n = values["topk"], values["num_steps"], values["num_draft_tokens"]
    batch = random_tree_batch(random.Random(0), len(seq), k, d, n)
    return {"topk": k, "depth": d, "n": n, "mode": int(mode), "seq_lens": seq,
            "selected_index": batch.selected_index.reshape(-1).tolist(),
            "parent_list": batch.parent_list.reshape(-1).tolist(), "mask_numel": numel}


def run(index: SourceIndex, kind: str, case: dict) -> Replay:
    """The case launched on the release's kernel (or, for a tree case where the release has
    no Triton tree build, on specbound's, with ``stand_in`` saying why): a
    :class:`specbound.replay.Replay` whose ``inputs`` is the case."""
    if kind == "draft_kv_indices":
        return _replay_kv(index, case)
    if kind == "tree_mask":
        return _replay_tree(index, case)
    raise ValueError(f"kind must be draft_kv_indices or tree_mask, got {kind!r}")


def _as_replay(finding: kernels.Finding | None, case: dict, kernel: str, stand_in: str = "") -> Replay:
    if finding is None:
        return Replay("none", "no out-of-bounds access", case, kernel, stand_in)
    if finding.kind == DIVERGED:    # a race, or outputs that differ from the spec's
        verdict = "race" if finding.message.startswith(kernels.RACE_PREFIX) else "output"
    else:
        verdict = "oob" if finding.kind == OOB else "error"
    return Replay(verdict, finding.message, case, kernel, stand_in)


def load(index: SourceIndex, name: str, files, aliases, known: set[str]):
    """(found, loaded kernel, why not) of sglang's kernel ``name`` in ``files``."""
    found = index.find(name, files)
    if found is None:
        return None, None, f"this sglang has no `{name}`"
    _, missing = kernels.bind(found, {}, aliases)
    unknown = [p for p in missing if kernels.value_key(p, aliases) not in known]
    if unknown:
        return found, None, f"`{name}` ({found.where}) takes parameters the audit cannot feed: {unknown}"
    triton, tl, _ = kernels.triton_env()
    return found, index.load_kernel(found, triton, tl), ""


def attach(row, kernel: str, case: dict, finding: kernels.Finding | None, what: str) -> None:
    """The outcome of a finding row's replay on sglang's ``kernel`` at ``case``: the checked
    interpreter's fault is the row's evidence; a clean run makes the row an ``error`` (the audit's
    model of ``what`` the kernel does is off, never blamed on sglang)."""
    row.replay = {"kernel": kernel, "inputs": case, "verdict": "oob" if finding is not None else "none",
                  "message": finding.message if finding is not None else "no out-of-bounds access"}
    if finding is None:
        row.status = ERROR
        row.detail += f"; the replay on sglang's kernel stayed in bounds: the audit's model of {what} is off"
    else:
        row.evidence = finding.message


def _replay_kv(index: SourceIndex, case: dict) -> Replay:
    found, kernel, why = load(index, KV_KERNEL, KV_FILES, KV_ALIASES, kv_kernel.KV_FED)
    if kernel is None:
        return Replay("error", why, case, f"sglang's {KV_KERNEL}")
    width = case["width"]
    finding = kv_kernel.run_kv_no_room(kernel, found, case, lambda *_: width, rows=case["rows"])
    return _as_replay(finding, case, f"sglang's {KV_KERNEL} ({found.where})")


def _replay_tree(index: SourceIndex, case: dict) -> Replay:
    found, kernel, why = load(index, TREE_KERNEL, TREE_FILES, TREE_ALIASES,
                               tree_kernel.TREE_FED)
    if kernel is not None:
        finding = tree_kernel.run_tree(kernel, found, case, mask_numel=case["mask_numel"])
        return _as_replay(finding, case, f"sglang's {TREE_KERNEL} ({found.where})")
    why = (f"{why}: this release ships only the CUDA tree build (sgl-kernel), which needs a GPU; replayed on "
           "specbound.kernels' Triton tree build, whose writes are the spec's footprint")
    return _as_replay(_specbound_tree(case), case, "specbound.kernels.tree_build.build_tree_kernel", why)


def _specbound_tree(case: dict) -> kernels.Finding | None:
    import torch

    kernels.triton_env()
    from specbound.kernels import tree_build

    pl, sel, seq = tree_kernel.tree_case_tensors(case)
    bs, n = seq.numel(), case["n"]
    mask = torch.ones(case["mask_numel"], dtype=torch.bool)
    positions = torch.zeros(bs * n, dtype=torch.int64)
    outs = [torch.full((bs, n), -1, dtype=torch.int64) for _ in range(3)]
    return kernels.launch_finding(lambda: tree_build.launch_tree(
        pl, sel, seq, mask, positions, *outs, topk=case["topk"], depth=case["depth"], num_draft_tokens=n,
        mode=spec.TreeMaskMode(case["mode"])))


def command(sglang_root, kind: str, case: dict) -> str:
    return (f"python -m specbound.engines.sglang.buffer_replay --sglang-path {shlex.quote(str(sglang_root))} --kernel {kind} "
            f"--case {shlex.quote(json.dumps(case, separators=(',', ':')))}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m specbound.engines.sglang.buffer_replay", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sglang-path", required=True, metavar="DIR")
    p.add_argument("--kernel", required=True, choices=("draft_kv_indices", "tree_mask"))
    p.add_argument("--case", required=True, help="the case as JSON (from the audit's row)")
    args = p.parse_args(argv)

    try:
        inst = locate(args.sglang_path)
        case = json.loads(args.case)
    except (NotInstalled, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = run(SourceIndex(inst.root), args.kernel, case)
    print(f"kernel: {result.kernel}" + (f" ({result.stand_in})" if result.stand_in else ""))
    if result.verdict == "none":
        print(result.detail)
        return 0
    print(f"{result.verdict}: {result.detail}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
