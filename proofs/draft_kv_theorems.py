"""Theorems about the draft-decode kv_indices buffer (KV-*).

``D`` is the number of draft steps (rows of the buffer), ``num_seqs`` the requests,
``K`` the branches per request; ``P``/``Q`` are the prefix sums of seq_len and of the
per-branch positions.  Formulas come from ``d`` (the spec or a mutant's view).
"""

from __future__ import annotations

import z3

from specbound import spec

from . import core
from . import lemmas
from .model import (
    C, D, K, P, POSITIONS_ZERO, PREFIX_ZERO, Q, b, draft_room_conds, e, in_batch, iters, kv_params,
    labelled, max_bs, num_seqs, page, per_request, prefix_at, seq_len, seq_len_conds, t, width,
)
from .theorem import Mutant, Theorem

FAMILY = "draft kv_indices"
b2, t2, off = z3.Ints("b2 t2 offset")
N_DRAFT = z3.Int("num_draft_tokens")   # free in the mutant: any tree size sglang accepts at K > 1


def _report(*extra):
    base = {"num_seqs": num_seqs, "K": K, "D": D, "C": C, "iters": iters, "b": b, "t": t,
            "seq_len[b]": seq_len(b), "P[b]": P(b), "S": P(num_seqs)}
    base.update(dict(extra))
    return lambda: base


def _branch(i=b, ti=t):
    return {f"request_in_batch[{i}]": in_batch(i, num_seqs), f"branch_in_request[{i}]": z3.And(0 <= ti, ti < K),
            **per_request(seq_len_conds, size=num_seqs)}


def _row():
    return {"row_in_grid": z3.And(1 <= iters, iters <= D)}


def _extension(s):
    """Extension ``e`` of branch ``t`` in draft step ``iters`` of a request of length ``s``."""
    return {**kv_params(), **_row(), "branch_in_request": z3.And(0 <= t, t < K),
            "extension_in_row": z3.And(0 <= e, e < iters), **labelled(spec.seq_len_ok(s, C))}


def _segment(d, i, ti):
    start = d.kv_segment_start(P(i), i, ti, K, iters, seq_len(i))
    return start, start + d.kv_segment_len(seq_len(i), iters)


def kv_tiling() -> Theorem:
    def hyps(d):
        h = {**kv_params(), **_row(), **_branch(b, t), **_branch(b2, t2)}
        h["branches_ordered"] = z3.Or(b < b2, z3.And(b == b2, t < t2))
        return h

    def claim(d):
        start, end = _segment(d, b, t)
        start2, _ = _segment(d, b2, t2)
        last_end = _segment(d, b, K - 1)[1]
        return z3.And(
            d.kv_segment_start(0, 0, 0, K, iters, seq_len(0)) == 0,          # first segment at 0
            end > start,                                                     # segments are non-empty
            end <= start2,                                                   # ordered segments are disjoint
            z3.Implies(t + 1 < K, _segment(d, b, t + 1)[0] == end),          # no gap between branches
            last_end == d.kv_segment_start(P(b + 1), b + 1, 0, K, iters, seq_len(b + 1)),  # nor requests
            d.kv_segment_start(P(num_seqs), num_seqs, 0, K, iters, 0)
            == d.draft_kv_indices_used_len(P(num_seqs), K, d.draft_branches(num_seqs, K), iters),
        )
    return Theorem(
        id="KV-TILING", family=FAMILY,
        statement=("at every step, branch segments are non-empty, ordered ones are disjoint, and they tile "
                   "[0, used_len(S, K, bs_d, iters)) with no gap"),
        hyps=hyps, claim=claim, at=(b, b2),
        report=_report(("b2", b2), ("t2", t2), ("seq_len[b2]", seq_len(b2)), ("P[b2]", P(b2))),
        lemmas=lambda: [prefix_at(b), prefix_at(b2), core.instantiate(lemmas.prefix_bound(num_seqs), b),
                        core.instantiate(lemmas.prefix_bound(num_seqs), num_seqs),
                        core.instantiate(lemmas.prefix_monotone(num_seqs), b2, b + 1),
                        core.instantiate(lemmas.mul_le_mono(), P(b + 1), P(b2), K),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, b2, iters * K),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, t2, seq_len(b) + iters),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, K, seq_len(b) + iters)],
        mutants=(
            Mutant("MUT-SEGMENT-NO-TOPK", "segment start P[b] + b*iters*K + ...: the prefix not times K",
                   overrides={"kv_segment_start": lambda p, bi, ti, kk, it, s: p + bi * it * kk + ti * (s + it)}),
            Mutant("MUT-SEGMENT-STRIDE-NO-ITERS", "branch stride seq_len[b] without its iters extension slots",
                   overrides={"kv_segment_start": lambda p, bi, ti, kk, it, s: p * kk + bi * it * kk + ti * s}),
        ),
    )


def kv_capacity() -> Theorem:
    S = P(num_seqs)

    def hyps(d):
        return {**kv_params(), **per_request(seq_len_conds, draft_room_conds, size=num_seqs)}

    def claim(d):
        used = d.draft_kv_indices_used_len(S, K, d.draft_branches(num_seqs, K), D)
        row = d.draft_kv_indices_buffer_width(num_seqs, K, C)
        return z3.And((used <= row) == (S + num_seqs * D <= num_seqs * C), used <= row)
    return Theorem(
        id="KV-CAPACITY", family=FAMILY,
        statement=("used_len(S, K, bs_d, D) <= width(num_seqs, K, C) iff S + num_seqs*D <= num_seqs*C; "
                   "it holds when every seq_len[b] + D <= C (room for the draft tokens)"),
        hyps=hyps, claim=claim,
        report=lambda: {"num_seqs": num_seqs, "K": K, "D": D, "C": C, "S": S,
                        "seq_len[0]": seq_len(0)},
        lemmas=lambda: [core.instantiate(lemmas.prefix_room(num_seqs), num_seqs),
                        core.instantiate(lemmas.prefix_monotone(num_seqs), num_seqs, 1)],  # S >= seq_len[0]
        search_indices=1,  # the first request is shown: S = seq_len[0] for a single request
        mutants=(
            Mutant("MUT-27338-MISSING-TOPK", "row width num_seqs*C, without the factor K (sglang #27338)",
                   overrides={"draft_kv_indices_buffer_width": lambda ns, kk, cc: ns * cc}),
            Mutant("MUT-NO-DRAFT-ROOM",
                   "a request without room for its draft tokens (seq_len + D > C): the check fails",
                   drop=("draft_room", "L-PREFIX-ROOM"),
                   shape=lambda d: [num_seqs == 1, seq_len(0) + D > C]),
        ),
    )


def kv_steps_monotone() -> Theorem:
    S = P(num_seqs)

    def claim(d):
        bs_d = d.draft_branches(num_seqs, K)
        checked = d.draft_kv_capacity_ok(S, K, num_seqs, D, width)
        return z3.Implies(checked, z3.And(
            d.draft_kv_indices_used_len(S, K, bs_d, iters) <= d.draft_kv_indices_used_len(S, K, bs_d, D),
            d.draft_kv_indices_used_len(S, K, bs_d, iters) <= width))
    return Theorem(
        id="KV-STEPS-MONOTONE", family=FAMILY,
        statement=("used_len at any row iters <= D is <= used_len at D, so the host check at D covers every "
                   "row the grid writes"),
        hyps=lambda d: {**kv_params(), **_row(), "seq_lens_sum_nonneg": S >= 0,
                        "row_width_nonneg": width >= 0},
        claim=claim,
        report=lambda: {"num_seqs": num_seqs, "K": K, "D": D, "S": S, "iters": iters, "width": width},
        lemmas=lambda: [core.instantiate(lemmas.mul_le_mono(), iters, D, num_seqs * K)],
        mutants=(Mutant("MUT-CHECK-STEPS-MINUS-ONE",
                        "capacity checked at D - 1 steps while the grid writes D rows",
                        overrides={"draft_kv_capacity_ok": lambda s, kk, ns, st, w:
                                   spec.draft_kv_indices_used_len(s, kk, ns * kk, st - 1) <= w}),),
    )


def kv_indptr_matches_offsets() -> Theorem:
    z = b * K + t

    def hyps(d):
        return {**kv_params(), **_row(), **_branch()}

    def claim(d):
        bs_d = d.draft_branches(num_seqs, K)
        return z3.And(
            Q(z) == d.kv_positions_prefix(P(b), t, K, seq_len(b)),
            d.kv_indptr_entry(Q(z), z, iters) == d.kv_segment_start(P(b), b, t, K, iters, seq_len(b)),
            d.kv_indptr_entry(Q(bs_d), bs_d, iters)
            == d.draft_kv_indices_used_len(P(num_seqs), K, bs_d, iters),
            d.kv_indptr_entry(Q(0), 0, iters) == 0)
    return Theorem(
        id="KV-INDPTR-MATCHES-OFFSETS", family=FAMILY,
        statement=("the positions prefix of branch z = b*K + t is kv_positions_prefix(P[b], t, K, seq_len[b]); "
                   "kv_indptr[z] computed from it (plus z*iters) equals the start of segment z; "
                   "entry bs_d equals used_len; entry 0 is 0"),
        hyps=hyps, claim=claim, at=(b,),
        report=_report(("Q[z]", Q(z))),
        lemmas=lambda: [PREFIX_ZERO, POSITIONS_ZERO, core.instantiate(lemmas.positions_within_request(), t, b),
                        core.instantiate(lemmas.positions_prefix(), b),
                        core.instantiate(lemmas.positions_prefix(), num_seqs)],
        mutants=(Mutant("MUT-INDPTR-NO-EXTENSION", "kv_indptr without the z*iters extension slots",
                        overrides={"kv_indptr_entry": lambda q, zz, it: q}),
                 Mutant("MUT-POSITIONS-PREFIX-NO-TOPK", "positions prefix P[b] + t*seq_len, without the factor K",
                        overrides={"kv_positions_prefix": lambda p, ti, kk, s: p + ti * s})),
    )


def kv_cuda_graph_covers() -> Theorem:
    def hyps(d):
        h = {**kv_params(), **per_request(seq_len_conds, draft_room_conds, size=num_seqs), **labelled(spec.max_bs_ok(max_bs))}
        h["captured_batch_fits"] = num_seqs <= max_bs
        return h

    def claim(d):
        used = d.draft_kv_indices_used_len(P(num_seqs), K, d.draft_branches(num_seqs, K), D)
        return used <= d.draft_kv_indices_buffer_width(max_bs, K, C)
    return Theorem(
        id="KV-CUDA-GRAPH-COVERS", family=FAMILY,
        statement=("a buffer row sized width(max_bs, K, C) covers any num_seqs <= max_bs when every request "
                   "has room for its draft tokens (KV-CAPACITY's precondition)"),
        hyps=hyps, claim=claim,
        report=lambda: {"num_seqs": num_seqs, "max_bs": max_bs, "K": K, "D": D, "C": C, "S": P(num_seqs)},
        lemmas=lambda: [core.instantiate(lemmas.prefix_room(num_seqs), num_seqs),
                        core.instantiate(lemmas.mul_le_mono(), num_seqs, max_bs, K * C)],
        mutants=(Mutant("MUT-27338-MISSING-TOPK", "CUDA-graph row max_bs*C, without the factor K (#27338)",
                        overrides={"draft_kv_indices_buffer_width": lambda ns, kk, cc: ns * cc}),),
    )


def kv_paged_reads_in_row() -> Theorem:
    s = seq_len(b)

    def hyps(d):
        return _extension(s)

    def claim(d):
        read = d.kv_extension_read(s, t, e, K, D, page)
        base = d.kv_prefix_base(s, page)
        npp = d.kv_pages_per_branch(s, D, page)
        paged = z3.And(page > 1, K > 1)
        return z3.And(s <= read, read < d.kv_req_to_token_span(s, K, D, page),
                      z3.Implies(paged, z3.And(base <= read, read < base + K * npp * page)))
    return Theorem(
        id="KV-PAGED-READS-IN-ROW", family=FAMILY,
        statement=("every extension read of req_to_token lies in [seq_len, span); with page_size > 1 and K > 1 "
                   "it stays in [prefix_base, prefix_base + K*npp*page)"),
        hyps=hyps, claim=claim,
        report=lambda: {"seq_len[b]": s, "K": K, "D": D, "page_size": page, "t": t, "e": e, "iters": iters},
        lemmas=lambda: [core.instantiate(lemmas.cdiv_covers(), s % page + D, page),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, K, ((s % page + D + page - 1) / page) * page),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, K, D)],
        mutants=(Mutant("MUT-PAGES-FLOOR", "pages per branch rounded down: a branch runs into the next",
                        overrides={"kv_pages_per_branch": lambda sl, st, pg: (sl % pg + st) / pg,
                                   "kv_extension_read": lambda sl, ti, ee, kk, st, pg: z3.If(
                                       z3.Or(pg == 1, kk == 1), sl + ti * st + ee,
                                       (sl / pg) * pg + ti * ((sl % pg + st) / pg) * pg + sl % pg + ee)}),),
    )


def kv_r2t_read_end() -> Theorem:
    s = seq_len(b)

    def hyps(d):
        return _extension(s)

    def claim(d):
        end = d.kv_req_to_token_read_end(s, K, D, page)
        span = d.kv_req_to_token_span(s, K, D, page)
        return z3.And(d.kv_extension_read(s, t, e, K, D, page) < end, end <= span,
                      z3.Implies(z3.Or(page == 1, K == 1), end == span))
    return Theorem(
        id="KV-R2T-READ-END", family=FAMILY,
        statement=("every extension read of req_to_token lies below kv_req_to_token_read_end, the last branch's "
                   "last slot plus one; that end is at most the span (equal to it for contiguous branches), so "
                   "a row as wide as the end is all the draft kv build reads"),
        hyps=hyps, claim=claim,
        report=lambda: {"seq_len[b]": s, "K": K, "D": D, "page_size": page, "t": t, "e": e, "iters": iters},
        lemmas=lambda: [core.instantiate(lemmas.cdiv_covers(), s % page + D, page)],
        mutants=(Mutant("MUT-R2T-READ-END-LAST", "the end is the last slot read, not one past it: a row that wide "
                        "misses the last branch's last draft slot",
                        overrides={"kv_req_to_token_read_end": lambda sl, kk, st, pg: spec.kv_extension_read(
                            sl, kk - 1, st - 1, kk, st, pg)}),),
    )


def kv_int32_safe() -> Theorem:
    s = seq_len(b)

    def hyps(d):
        h = {**kv_params(), **_row(), **_branch(),
             "offset_in_segment": z3.And(0 <= off, off < d.kv_segment_len(s, iters))}
        h["capacity_checked"] = d.draft_kv_capacity_ok(P(num_seqs), K, num_seqs, D, width)
        h.update(labelled(spec.int32_alloc_ok(width, name="width")))
        return h

    def claim(d):
        p = P(b)
        # Each partial sum of spec.kv_segment_start, in its order, then the slot inside the segment.
        terms = [p * K, p * K + b * iters * K, d.kv_segment_start(p, b, t, K, iters, s),
                 d.kv_segment_start(p, b, t, K, iters, s) + off]
        return z3.And(*[z3.And(0 <= x, x < spec.INT32_LIMIT) for x in terms])
    return Theorem(
        id="KV-INT32-SAFE", family=FAMILY,
        statement=("width < 2^31 and the host capacity check passed => every kv_indices offset the kernel "
                   "computes (each partial sum, in its order) stays in [0, 2^31)"),
        hyps=hyps, claim=claim, at=(b,),
        report=_report(("width", width), ("offset", off)),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_bound(num_seqs), b),
                        core.instantiate(lemmas.prefix_monotone(num_seqs), num_seqs, b + 1),
                        core.instantiate(lemmas.mul_le_mono(), P(b + 1), P(num_seqs), K),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, num_seqs, iters * K),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, K, s + iters),
                        core.instantiate(lemmas.mul_le_mono(), iters, D, num_seqs * K)],
        mutants=(Mutant("MUT-INT32-OVERFLOW", "int32 offsets with a row of >= 2^31 slots",
                        drop=("alloc_below_int32",)),),
    )


def kv_r2t_row_covers() -> Theorem:
    s = seq_len(b)

    def hyps(d):
        h = {**kv_params()}
        h.update(labelled(seq_len_conds(b)))
        h.update(labelled(draft_room_conds(b)))
        return h

    def claim(d):
        return d.kv_req_to_token_span(s, K, D, page) <= d.req_to_token_draft_row_width(C, K, D, page)
    return Theorem(
        id="KV-R2T-ROW-COVERS", family=FAMILY,
        statement=("a request with draft room (seq_len[b] + D <= C) reads req_to_token only below "
                   "req_to_token_draft_row_width(C, K, D, page_size): a row that wide holds the draft slots "
                   "of every admitted request, contiguous or page aligned"),
        hyps=hyps, claim=claim,
        report=lambda: {"seq_len[b]": s, "K": K, "D": D, "page_size": page, "C": C},
        lemmas=lambda: [core.instantiate(lemmas.mul_le_mono(), (s % page + D + page - 1) / page,
                                         (page - 1 + D + page - 1) / page, K * page),
                        core.instantiate(lemmas.div_le_mono(), s, C - D, page)],
        mutants=(Mutant("MUT-R2T-CONTEXT-HEADROOM",
                        "sglang's row, C + 4 + num_draft_tokens (every release at page_size 1; PR #26972 widened "
                        "it for page_size > 1 only), with sglang's own num_draft_tokens = D + 1 at K = 1",
                        overrides={"req_to_token_draft_row_width":
                                   lambda c, kk, st, pg: c + 4 + z3.If(kk == 1, st + 1, z3.If(N_DRAFT >= 2, N_DRAFT, 2))}),),
    )


COMMITTED, MAX_COMMITTED, RESERVE = z3.Ints("kv_committed_len max_committed_len reserve")


def kv_r2t_reservation_covers() -> Theorem:
    def hyps(d):
        return {"page_size_positive": page >= 1, "reserve_nonneg": RESERVE >= 0,
                "committed_nonneg": COMMITTED >= 0, "scheduler_bound": COMMITTED <= MAX_COMMITTED}

    def claim(d):
        return d.decode_reservation_end(COMMITTED, RESERVE, page) <= \
            d.req_to_token_reservation_row_width(MAX_COMMITTED, RESERVE, page)
    return Theorem(
        id="KV-R2T-RESERVATION-COVERS", family=FAMILY,
        statement=("a request the scheduler keeps decoding (kv_committed_len <= max_committed_len) has its decode "
                   "reservation, committed + reserve rounded up to whole pages, inside "
                   "req_to_token_reservation_row_width(max_committed_len, reserve, page_size)"),
        hyps=hyps, claim=claim,
        report=lambda: {"kv_committed_len": COMMITTED, "max_committed_len": MAX_COMMITTED, "reserve": RESERVE,
                        "page_size": page},
        lemmas=lambda: [core.instantiate(lemmas.div_le_mono(), COMMITTED + RESERVE + page - 1,
                                         MAX_COMMITTED + RESERVE + page - 1, page)],
        mutants=(Mutant("MUT-R2T-RESERVATION-UNALIGNED",
                        "the row as wide as the longest committed length plus the reserve, not rounded up to whole "
                        "pages: the reservation's last page runs past it",
                        overrides={"req_to_token_reservation_row_width": lambda c, r, pg: c + r}),),
    )


THEOREMS = (kv_tiling, kv_capacity, kv_steps_monotone, kv_indptr_matches_offsets,
            kv_cuda_graph_covers, kv_paged_reads_in_row, kv_r2t_read_end, kv_int32_safe, kv_r2t_row_covers,
            kv_r2t_reservation_covers)
