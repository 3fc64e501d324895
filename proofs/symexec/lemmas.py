"""Small arithmetic lemmas the kernel obligations cite (each proved once by the trusted
core, then instantiated at the executor's terms so queries stay quantifier free)."""

from __future__ import annotations

from functools import cache

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.lemmas import cdiv_covers, mul_le_mono


@cache
def div_lt():
    """``0 <= q < m*k /\\ k >= 1  =>  q div k < m``."""
    return core.check_forall(
        "L-DIV-LT", lambda q, k, m: z3.Implies(z3.And(q >= 0, q < m * k, k >= 1), q / k < m), 3)


@cache
def div_mod_range():
    """``q >= 0 /\\ k >= 1  =>  q = k*(q div k) + q mod k /\\ 0 <= q mod k < k /\\ q div k >= 0``."""
    return core.check_forall(
        "L-DIV-MOD-RANGE",
        lambda q, k: z3.Implies(z3.And(q >= 0, k >= 1),
                                z3.And(q == k * (q / k) + q % k, q % k >= 0, q % k < k, q / k >= 0)), 2)


@cache
def mul_lt_mono():
    """``0 <= x < y /\\ z >= 1  =>  x*z < y*z``."""
    return core.check_forall(
        "L-MUL-LT-MONO", lambda x, y, z: z3.Implies(z3.And(0 <= x, x < y, z >= 1), x * z < y * z), 3)


def at(lemma, *terms):
    return core.instantiate(lemma(), *terms)


@cache
def div_unique():
    """``0 <= r < k  =>  (k*d + r) div k = d /\\ (k*d + r) mod k = r``."""
    return core.check_forall(
        "L-DIV-UNIQUE",
        lambda d, r, k: z3.Implies(z3.And(0 <= r, r < k), z3.And((k * d + r) / k == d, (k * d + r) % k == r)), 3)


@cache
def kv_segment_in_row():
    """L-KV-SEGMENT-IN-ROW: branch (b, t) of step ``it`` (seq_len ``s``, prefix ``p = P[b]``,
    ``p + s <= pn = P[num_seqs]``) has its whole segment inside row ``it - 1`` when the host
    capacity check passed, and that row inside the buffer:
    ``kv_indices_cell(w, it, kv_segment_start + kv_segment_len) <= it*w <= D*w``.

    The kernel's offsets are these products with lane terms for b, t and it; proved once here
    over plain variables, the per-specialization bounds queries become linear."""
    def body(p, pn, b, ns, t, it, s, k, d, w):
        start = spec.kv_segment_start(p, b, t, k, it, s)
        end = spec.kv_indices_cell(w, it, start + spec.kv_segment_len(s, it))
        pre = z3.And(k >= 1, 0 <= t, t < k, 1 <= it, it <= d, 0 <= b, b < ns, s >= 0, p >= 0, p + s <= pn,
                     spec.draft_kv_capacity_ok(pn, k, ns, d, w))
        return z3.Implies(pre, z3.And(end <= it * w, it * w <= d * w))

    def steps(p, pn, b, ns, t, it, s, k, d, w):
        m = mul_le_mono()
        return [core.instantiate(m, t, k - 1, s + it), core.instantiate(m, p + s, pn, k),
                core.instantiate(m, b + 1, ns, it * k), core.instantiate(m, it, d, ns * k),
                core.instantiate(m, it, d, w)]
    return core.check_forall("L-KV-SEGMENT-IN-ROW", body, 10, by_at=steps)


@cache
def kv_extension_read_in_row():
    """L-KV-EXTENSION-READ-IN-ROW: extension slot ``e < D`` of branch ``t < K`` reads
    ``req_to_token`` at ``seq_len <= kv_extension_read < kv_req_to_token_span`` (both the
    contiguous and the page-aligned layout; the spec's KV-PAGED-READS-IN-ROW over plain
    variables, so the kernel's paged read bound needs no nonlinear search of its own)."""

    def body(s, t, e, k, d, page):
        read = spec.kv_extension_read(s, t, e, k, d, page)
        pre = z3.And(k >= 1, 0 <= t, t < k, 0 <= e, e < d, page >= 1, s >= 0)
        return z3.Implies(pre, z3.And(s <= read, read < spec.kv_req_to_token_span(s, k, d, page)))

    def steps(s, t, e, k, d, page):
        m = mul_le_mono()
        npp_page = ((s % page + d + page - 1) / page) * page
        return [core.instantiate(cdiv_covers(), s % page + d, page), core.instantiate(m, t + 1, k, npp_page),
                core.instantiate(m, t + 1, k, d)]
    return core.check_forall("L-KV-EXTENSION-READ-IN-ROW", body, 6, by_at=steps)


@cache
def indptr_entry_is_segment_start():
    """L-KV-INDPTR-IS-SEGMENT: a ``kv_indptr`` entry ``z = b*K + t`` computed from the positions
    prefix ``q = K*P[b] + t*seq_len[b]`` is the start of branch z's segment,
    ``kv_indptr_entry(q, z, it) == kv_segment_start(P[b], b, t, K, it, seq_len[b])`` (the
    algebra behind KV-INDPTR-MATCHES-OFFSETS over plain variables, so a kernel query that
    computes the entry by a sum needs no nonlinear search of its own)."""
    def body(q, p, b, t, k, it, s):
        return z3.Implies(q == k * p + t * s,
                          spec.kv_indptr_entry(q, b * k + t, it) == spec.kv_segment_start(p, b, t, k, it, s))
    return core.check_forall("L-KV-INDPTR-IS-SEGMENT", body, 7)


@cache
def kv_segment_start_nonneg():
    """L-KV-SEGMENT-START-NONNEG: ``kv_segment_start(p, b, t, k, it, s) >= 0`` for non-negative
    prefix, request, branch and length, ``k, it >= 1`` (a segment never starts before its row)."""
    def body(p, b, t, k, it, s):
        pre = z3.And(p >= 0, b >= 0, t >= 0, k >= 1, it >= 1, s >= 0)
        return z3.Implies(pre, spec.kv_segment_start(p, b, t, k, it, s) >= 0)

    def steps(p, b, t, k, it, s):
        m = mul_le_mono()
        return [core.instantiate(m, z3.IntVal(0), p, k), core.instantiate(m, z3.IntVal(0), b, it * k),
                core.instantiate(m, z3.IntVal(0), t, s + it), core.instantiate(m, z3.IntVal(0), it, k)]
    return core.check_forall("L-KV-SEGMENT-START-NONNEG", body, 6, by_at=steps)


@cache
def kv_cell_in_buffer():
    """L-KV-CELL-IN-BUFFER: column ``col < s + it`` of branch (b, t) in row ``it - 1`` is a
    cell of the ``(d, w)`` buffer, ``0 <= kv_indices_cell(w, it, start + col) < d*w``, under
    L-KV-SEGMENT-IN-ROW's premises (capacity checked, ``p + s <= pn``)."""
    def body(p, pn, b, ns, t, it, s, k, d, w, col):
        start = spec.kv_segment_start(p, b, t, k, it, s)
        cell = spec.kv_indices_cell(w, it, start + col)
        pre = z3.And(k >= 1, 0 <= t, t < k, 1 <= it, it <= d, 0 <= b, b < ns, s >= 0, p >= 0, p + s <= pn,
                     spec.draft_kv_capacity_ok(pn, k, ns, d, w), 0 <= col, col < spec.kv_segment_len(s, it))
        return z3.Implies(pre, z3.And(0 <= cell, cell < d * w))

    def steps(p, pn, b, ns, t, it, s, k, d, w, col):
        m = mul_le_mono()
        return [core.instantiate(kv_segment_in_row(), p, pn, b, ns, t, it, s, k, d, w),
                core.instantiate(kv_segment_start_nonneg(), p, b, t, k, it, s),
                core.instantiate(m, z3.IntVal(0), it - 1, w), core.instantiate(m, it, d, w)]
    return core.check_forall("L-KV-CELL-IN-BUFFER", body, 11, by_at=steps)
