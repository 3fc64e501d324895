"""sglang's kernel specializations over our serving envelope (``kernels/plan.py``'s
``ENVELOPE``): which constexprs sglang's launch sites compute for those batches, and how many
of them the manifest's sglang theorems prove.

The draft kv kernel's constexprs (:mod:`specbound.engines.sglang.draft_kv_model`):
``NUM_STEPS`` 0 or ``num_steps``, ``page_size`` 1 or larger (one symbolic proof), and the lane
bounds ``bs_upper = pow2(num_seqs)``, ``iter_upper = pow2(num_steps)``,
``num_tokens_upper = pow2(num_seqs * topk)``: enumerated over every batch size; a proof with
symbolic lane bounds (label ``bs_upper=2^0..2^8``: every power of two of the range, a stated
precondition) covers each of them with its NUM_STEPS and page case.  The tree
build's (:mod:`specbound.engines.sglang.tree_model`) are the batch shape itself
``(K, D, n, mode, batch_size)``, one compiled kernel per batch size: counted, not listed; a
proof symbolic in the batch size (label ``batch_size=1..N``) covers every batch of its range.
"""

from __future__ import annotations

from specbound import spec
from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.engines.sglang.draft_kv_model import KvSpec


def _plan():
    return torch_free_module("plan")


def _configs(env, configs):
    """(K, D, n) of the envelope (n = None for the kv kernel's) or the given ``configs``."""
    if configs is not None:
        return list(configs)
    ks, ds = range(env.topk[0], env.topk[1] + 1), range(env.num_steps[0], env.num_steps[1] + 1)
    return [(k, d, n) for k in ks for d in ds for n in range(env.num_draft_tokens[0], env.num_draft_tokens[1] + 1)
            if spec.conjunction(spec.tree_shape_ok(k, d, n))]


def kv_specs(configs=None) -> list:
    """The sglang draft kv specializations (``KvSpec``) over the envelope (or at ``configs``):
    the constexprs sglang's launch sites compute for every batch size, topk and step count, in
    a stable order (each once)."""

    plan = _plan()
    env = plan.ENVELOPE
    pairs = sorted({(k, d) for k, d, _n in _configs(env, configs)})
    out: dict = {}
    for k, d in pairs:
        for bs in range(env.batch[0], env.batch[1] + 1):
            for steps in (0, d):
                for paged in (False, True):
                    sp = KvSpec(steps, paged, plan.pow2(bs), plan.pow2(d), plan.pow2(bs * k))
                    out.setdefault(sp.label, sp)
    return list(out.values())


def kv_labels(configs=None) -> set:
    """The sglang draft kv specializations' labels over the envelope (or at ``configs``)."""
    return {sp.label for sp in kv_specs(configs)}


def _label_fields(label: str) -> dict:
    return dict(part.split("=", 1) for part in label.split(","))


def tree_batches(label: str, configs=None) -> int:
    """How many batch sizes of the envelope a sglang tree specialization's label
    (``K=..,D=..,n=..,mode=..,batch_size=N`` or ``batch_size=LO..HI``, a proof symbolic in the
    batch size) covers: 0 when its (K, D, n) is not in the envelope (or ``configs``)."""
    env = _plan().ENVELOPE
    f = _label_fields(label)
    k, d, n = int(f["K"]), int(f["D"]), int(f["n"])
    lo, _sep, hi = f["batch_size"].partition("..")
    lo, hi = int(lo), int(hi or lo)
    if (k, d, n) not in set(_configs(env, configs)):
        return 0
    return max(0, min(hi, env.batch[1]) - max(lo, env.batch[0]) + 1)


def tree_in_envelope(label: str, configs=None) -> bool:
    """Whether a sglang tree specialization's label covers some batch of the envelope (or of
    ``configs``)."""
    return tree_batches(label, configs) > 0


def coverage(manifest: dict) -> list[dict]:
    """Per sglang kernel, over the whole envelope and at ``plan.TYPICAL_CONFIGS``: how many
    specializations sglang launches and how many of them the manifest proves."""
    plan = _plan()
    proved: dict = {}
    for e in manifest.get("sglang_theorems", {}).values():
        proved.setdefault((e["kernel"], e["specialization"]), set()).add(e["verdict"])
    ok = {key for key, seen in proved.items() if seen == {"proved"}}
    kv_ok = [KvSpec.from_label(label) for kernel, label in ok if kernel == "SGLANG-DRAFT-KV"]
    tree_ok = [label for kernel, label in ok if kernel.startswith("SGLANG-TREE-")]
    env = plan.ENVELOPE
    rows = []
    for scope, configs in (("envelope", None), ("typical configurations", plan.TYPICAL_CONFIGS)):
        kv = kv_specs(configs)
        rows.append({"kernel": "SGLANG-DRAFT-KV", "scope": scope, "total": len(kv),
                     "proved": sum(any(p.covers(sp) for p in kv_ok) for sp in kv)})
        batches = env.batch[1] - env.batch[0] + 1
        rows.append({"kernel": "SGLANG-TREE", "scope": scope, "total": 2 * batches * len(_configs(env, configs)),
                     "proved": sum(tree_batches(label, configs) for label in tree_ok)})
    return rows
