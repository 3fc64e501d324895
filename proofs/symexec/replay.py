"""Concrete replays of counterexamples through the real kernel launch.

A counterexample (a Z3 model) is re-solved inside a small box so it reads as a real batch,
turned into concrete tensors, and launched through the kernel's launch plan exactly as the
launch wrappers do (:mod:`specbound.kernels.plan`), under
:func:`specbound.kernels.checked.checked_interpreter` with a per-program store recorder.
torch and triton are imported here only, at replay time.

Verdicts: ``oob`` (OutOfBoundsAccess), ``race`` (two programs stored one cell),
``output`` (result differs from the reference), ``assert`` (device_assert fired), or
``none`` (the replay did not reproduce anything: the counterexample is not reported as
a bug).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from specbound import spec
from specbound.proofs import kernel as K_

from . import mutants
from .obligations import instantiate


@dataclass
class Replay:
    verdict: str
    detail: str
    inputs: dict = field(default_factory=dict)


# --- concretising ----------------------------------------------------------------------------

def _box(run, limits: dict) -> list:
    out = []
    for name, term in run.report.items():
        lim = limits.get(name)
        if lim is not None and z3.is_int(term):
            out.append(z3.And(term >= lim[0], term <= lim[1]))
    return out


CONTENT_BOX = (-4, 40)  # tensor contents in a replay, unless a mutant asks for more


def concretise(run, ob, limits: dict, batch_cap: int, content_box: dict | None = None) -> dict | None:
    """A small model of ``hyps /\\ not goal``: the report scalars within ``limits``, every
    per-request content schema instantiated for the first ``batch_cap`` indices, each content
    value in ``CONTENT_BOX`` (or ``content_box[function name]``)."""
    hyps, lemmas = instantiate(ob.hyps, ob.goal, run.functions, ob.lemmas)
    extra = _box(run, limits)
    for name, (decl, schema) in run.functions.items():
        if decl.arity() == 1 and decl.range() == z3.IntSort() and not name.startswith(("min@", "max@", "sum@")):
            for i in range(batch_cap + 1):
                app = decl(z3.IntVal(i))
                for label, fact in schema(app).items():
                    if isinstance(fact, K_.Proof):
                        lemmas.append(fact)  # its hypotheses are the run's, discharged by them
                    else:
                        extra.append(fact)
                lo, hi = (content_box or {}).get(name, CONTENT_BOX)
                extra.append(z3.And(app >= lo, app <= hi))
    constraints = dict(hyps)
    constraints["goal!negated"] = z3.Not(ob.goal)
    try:
        found = K_.satisfy(f"{ob.id}/concrete", constraints, by=lemmas, extra=extra, rlimit=20_000_000)
    except K_.Unknown:
        return None
    if found is None:
        return None
    m = found.model
    val = lambda t: m.eval(t, model_completion=True).as_long()
    out = {name: val(term) for name, term in run.report.items() if z3.is_int(term)}
    out["_contents"] = {}
    for name, (decl, _schema) in run.functions.items():
        if decl.arity() == 1 and decl.range() == z3.IntSort():
            out["_contents"][name] = lambda i, d=decl: m.eval(d(z3.IntVal(i)), model_completion=True).as_long()
    out["_model"] = m
    return out


# --- running under the checked interpreter -------------------------------------------------------

def _checked_fault(launch, inputs) -> Replay | None:
    """Launch under the checked interpreter: an out-of-bounds access, a failed assert or two
    programs of one launch writing one cell as a Replay; None when the launch ran clean."""
    from specbound.kernels.checked import OutOfBoundsAccess, checked_interpreter

    with checked_interpreter(record_footprint=True) as session:
        try:
            launch()
        except OutOfBoundsAccess as exc:
            return Replay("oob", str(exc), inputs)
        except AssertionError as exc:
            return Replay("assert", f"device_assert fired: {exc}", inputs)
    race = session.conflicting_writes()
    return Replay("race", race, inputs) if race else None


# --- kernels -----------------------------------------------------------------------------------

def replay_kv(sp, conc: dict, plant=None, host: dict | None = None) -> Replay:
    import torch

    from specbound.reference import draft_decode_kv_indices as ref_kv

    host = host or {}
    ns_, k, d, page = conc["num_seqs"], conc["topk"], conc["num_steps"], conc["page_size"]
    contents = conc["_contents"]
    seq = [max(0, contents["seq_len"](i)) for i in range(ns_)]
    rows = [contents["pool_row"](i) for i in range(ns_)]
    r2t_w = max([spec.kv_req_to_token_span(s, k, d, page) for s in seq] + [conc["r2t_width"], 1])
    pool = max(rows + [conc["pool_rows"] - 1, 0]) + 1
    r2t_dtype = torch.int32 if sp.indices_dtype == "int32" else torch.int64
    if host.get("r2t_from_counterexample"):  # the entries themselves are the fault (a value wrap)
        r2t = torch.tensor([contents["req_to_token"](i) for i in range(pool * r2t_w)], dtype=r2t_dtype)
        r2t = r2t.reshape(pool, r2t_w)
    else:  # distinct entries, so a copy from the wrong slot shows
        r2t = torch.arange(pool * r2t_w, dtype=r2t_dtype).reshape(pool, r2t_w) + 1000
    width = conc["width"]
    stride = max(conc["indptr_stride"], ns_ * k + 1)
    inputs = {"num_seqs": ns_, "topk": k, "num_steps": d, "page_size": page, "seq_lens": seq,
              "req_pool_indices": rows, "width": width, "indptr_stride": stride, "spec": sp.label}
    from specbound.kernels import plan as launch_plans

    fn = mutants.kernel_of("draft_kv", "draft_kv_kernel", plant)
    kv_dtype = {"int64": torch.int64, "int32": torch.int32}
    kv_indices = torch.full((d, width), -1, dtype=kv_dtype[sp.indices_dtype])
    kv_indptr = torch.full((d, stride), -1, dtype=kv_dtype[sp.indptr_dtype])
    seq_t = torch.tensor(seq, dtype=torch.int64)
    prefix = torch.tensor(spec.prefix_sums(seq)[:-1], dtype=torch.int64)
    rows_t = torch.tensor(rows, dtype=torch.int64)
    plan = launch_plans.kv_plan(
        {"req_pool_indices_ptr": rows_t, "req_to_token_ptr": r2t, "seq_lens_ptr": seq_t, "prefix_ptr": prefix,
         "kv_indices_ptr": kv_indices, "kv_indptr_ptr": kv_indptr},
        num_seqs=ns_, topk=k, num_steps=d, page_size=page, width=width, indptr_stride=stride,
        r2t_stride0=r2t.stride(0), r2t_stride1=r2t.stride(1), block_b=sp.BLOCK_B, pairs=sp.PAIRS, steps=sp.STEPS,
        block_c=sp.BLOCK_C)

    def launch():
        plan.launch(fn)
    fault = _checked_fault(launch, inputs)
    if fault is not None:
        return fault
    ref_i, ref_p = ref_kv(rows_t, r2t, seq_t, topk=k, num_steps=d, page_size=page)
    used = ref_i.shape[1]
    if width < used or not torch.equal(kv_indices[:, :used].to(torch.int64), ref_i.to(torch.int64)) \
            or not torch.equal(kv_indptr[:, :ns_ * k + 1].to(torch.int64), ref_p.to(torch.int64)):
        return Replay("output", "kv_indices / kv_indptr differ from the reference", inputs)
    return Replay("none", "the launch matched the reference", inputs)


def _tree_inputs(conc, n_cap=64):
    import torch

    bs_, k, d, n = conc["bs"], conc["topk"], conc["depth"], conc["n"]
    c = conc["_contents"]
    seq = [max(0, c["seq_len"](i)) for i in range(bs_)]
    sel_w, pl_w = spec.selected_index_width(n), spec.parent_list_width(k, d)
    sel = torch.tensor([c["selected_index"](i) for i in range(bs_ * sel_w)], dtype=torch.int64).reshape(bs_, sel_w)
    pl = torch.tensor([c["parent_list"](i) for i in range(bs_ * pl_w)], dtype=torch.int64).reshape(bs_, pl_w)
    return bs_, k, d, n, seq, sel, pl


def replay_tree(sp, conc: dict, plant=None, host=None) -> Replay:
    import torch

    from specbound import reference
    from specbound.reference import validation

    bs_, k, d, n, seq, sel, pl = _tree_inputs(conc)
    mode = spec.TreeMaskMode(sp.MODE)
    inputs = {"bs": bs_, "topk": k, "depth": d, "n": n, "seq_lens": seq, "selected_index": sel.tolist(),
              "parent_list": pl.tolist(), "mode": mode.name, "spec": sp.label}
    seq_t = torch.tensor(seq, dtype=torch.int64)
    args = validation.validate_build_tree_args(pl, sel, seq_t, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                                               fill_prefix_mask=False)
    prefix = torch.tensor(args.prefix[:-1], dtype=torch.int64)
    from specbound.kernels import plan as launch_plans

    fn = mutants.kernel_of("tree_build", "build_tree_kernel", plant)
    plan = launch_plans.tree_plan(
        {"parent_list_ptr": args.parent_list, "selected_index_ptr": args.selected_index,
         "seq_lens_ptr": args.seq_lens, "prefix_ptr": prefix, "tree_mask_ptr": args.tree_mask,
         "positions_ptr": args.positions, "retrive_index_ptr": args.retrive_index,
         "next_token_ptr": args.retrive_next_token, "next_sibling_ptr": args.retrive_next_sibling},
        bs=bs_, topk=k, depth=d, n=n, mode=sp.MODE, block_b=sp.BLOCK_B, nodes=sp.NODES)

    def launch():
        plan.launch(fn)
    fault = _checked_fault(launch, inputs)
    if fault is not None:
        return fault
    ref = reference.build_tree(pl, sel, seq_t, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                               fill_prefix_mask=False)
    names = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
    for name, ours, theirs in zip(names, (args.tree_mask, args.positions, args.retrive_index,
                                          args.retrive_next_token, args.retrive_next_sibling), ref):
        from specbound.kernels.testing import signed_view
        if not torch.equal(signed_view(ours), signed_view(theirs)):
            return Replay("output", f"{name} differs from the reference", inputs)
    return Replay("none", "the launch matched the reference", inputs)


def replay_fill(sp, conc: dict, plant=None, host=None) -> Replay:
    import torch

    bs_, n = conc["bs"], conc["n"]
    c = conc["_contents"]
    seq = [max(0, c["seq_len"](i)) for i in range(bs_)]
    inputs = {"bs": bs_, "n": n, "seq_lens": seq, "spec": sp.label}
    numel = spec.mask_batch_numel(spec.TreeMaskMode.FULL_MASK, bs_, n, sum(seq))
    mask = torch.zeros(numel, dtype=torch.bool)
    seq_t = torch.tensor(seq, dtype=torch.int64)
    prefix = torch.tensor(spec.prefix_sums(seq)[:-1], dtype=torch.int64)
    from specbound.kernels import plan as launch_plans

    fn = mutants.kernel_of("tree_build", "fill_prefix_kernel", plant)
    plan = launch_plans.fill_plan({"tree_mask_ptr": mask, "seq_lens_ptr": seq_t, "prefix_ptr": prefix}, bs=bs_,
                                  n=n, block_b=sp.BLOCK_B, nodes=sp.NODES, block_c=sp.BLOCK_C)

    def launch():
        plan.launch(fn)
    fault = _checked_fault(launch, inputs)
    if fault is not None:
        return fault
    want = torch.zeros(numel, dtype=torch.bool)
    for cell in spec.mask_fill_cells(spec.TreeMaskMode.FULL_MASK, n, seq):
        want[cell] = True
    if not torch.equal(mask, want):
        return Replay("output", "prefix fill differs from spec.mask_fill_cells", inputs)
    return Replay("none", "the launch matched the spec", inputs)
