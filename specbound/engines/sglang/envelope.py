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
from specbound.engines.sglang.tree_model import PROPERTIES as TREE_PROPERTIES


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
    return tree_launches([label], configs)


def tree_in_envelope(label: str, configs=None) -> bool:
    """Whether a sglang tree specialization's label covers some batch of the envelope (or of
    ``configs``)."""
    return tree_batches(label, configs) > 0


def _label_ranges(label: str) -> tuple[dict, str]:
    """A tree label's inclusive ranges of K, D, n and the batch size (a value ``v`` is ``v..v``)
    and its mode."""
    f = _label_fields(label)
    out = {}
    for key in ("K", "D", "n", "batch_size"):
        lo, _sep, hi = f[key].partition("..")
        out[key] = (int(lo), int(hi or lo))
    return out, f["mode"]


def tree_launches(labels, configs=None) -> int:
    """The tree launches (K, D, n, mode, batch size) of the envelope (or ``configs``) that some
    label among ``labels`` covers, each counted once (a label's ranges: a concrete (K, D, n) or,
    for a proof symbolic in them, e.g. ``K=1..8,D=1..8,n=1..64``, every one of the scope's)."""
    env = _plan().ENVELOPE
    scope = _configs(env, configs)
    spans: dict = {}
    for label in labels:
        r, mode = _label_ranges(label)
        lo, hi = max(r["batch_size"][0], env.batch[0]), min(r["batch_size"][1], env.batch[1])
        if lo > hi:
            continue
        for k, d, n in scope:
            if all(r[key][0] <= v <= r[key][1] for key, v in (("K", k), ("D", d), ("n", n))):
                spans.setdefault((mode, k, d, n), []).append((lo, hi))
    return sum(_union_size(iv) for iv in spans.values())


def _union_size(intervals) -> int:
    total, end = 0, None
    for lo, hi in sorted(intervals):
        if end is not None and lo <= end:
            lo = end + 1
        if lo <= hi:
            total += hi - lo + 1
        end = hi if end is None else max(end, hi)
    return total


# Tree launches with some of the properties proved: rows of their own, never counted as fully
# proved.  Figure key -> the properties the row requires.
PARTIAL = {"tree-overrun": ("IN-BOUNDS", "NO-WRAP")}


def partial_row(figure: str) -> str:
    """The row name of a :data:`PARTIAL` figure: the kernel and the properties it requires."""
    return f"SGLANG-TREE ({', '.join(PARTIAL[figure])})"


OVERRUN_ROW = partial_row("tree-overrun")


def coverage(manifest: dict) -> list[dict]:
    """Per sglang kernel, over the whole envelope and at ``plan.TYPICAL_CONFIGS``: how many
    specializations sglang launches and how many of them the manifest proves.  A tree launch
    counts as proved only when every property of :mod:`.tree_model` is proved for it; the
    launches with the properties of a :data:`PARTIAL` figure proved (by a per-(K, D, n) proof
    or an envelope proof of :mod:`.tree_symbolic`) are rows of their own."""
    plan = _plan()
    verdicts: dict = {}
    for e in manifest.get("sglang_theorems", {}).values():
        verdicts.setdefault((e["kernel"], e["specialization"]), {})[e["property"]] = e["verdict"]
    ok = {key for key, props in verdicts.items() if set(props.values()) == {"proved"}}
    kv_ok = [KvSpec.from_label(label) for kernel, label in ok if kernel == "SGLANG-DRAFT-KV"]
    tree = {key: {p for p, v in props.items() if v == "proved"} for key, props in verdicts.items()
            if key[0].startswith("SGLANG-TREE-")}
    tree_ok = [label for (_kernel, label), proved in tree.items() if proved >= set(TREE_PROPERTIES)]
    partial_ok = {figure: [label for (_kernel, label), proved in tree.items() if proved >= set(props)]
                  for figure, props in PARTIAL.items()}
    env = plan.ENVELOPE
    rows = []
    for scope, configs in (("envelope", None), ("typical configurations", plan.TYPICAL_CONFIGS)):
        kv = kv_specs(configs)
        rows.append({"kernel": "SGLANG-DRAFT-KV", "scope": scope, "total": len(kv),
                     "proved": sum(any(p.covers(sp) for p in kv_ok) for sp in kv)})
        batches = env.batch[1] - env.batch[0] + 1
        total = 2 * batches * len(_configs(env, configs))
        rows.append({"kernel": "SGLANG-TREE", "scope": scope, "total": total, "proved": tree_launches(tree_ok, configs)})
        for figure, labels in partial_ok.items():
            rows.append({"kernel": partial_row(figure), "scope": scope, "total": total, "figure": figure,
                         "proved": tree_launches(labels, configs)})
    return rows
