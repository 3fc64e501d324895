"""Theorems about the conventions every implementation shares (CONV-*).

A size or element type that the reference, the kernels and the fuzz all take from the
same spec function cannot be checked differentially: a wrong choice is wrong
everywhere at once.  So each is stated here, with a mutant that puts a plausible wrong
choice back:

* the BITPACKING item is the smallest of 8/16/32 bits holding ``n`` bits (sglang's
  ``packed_dtypes[ceil(log2(ceil(n/8)))]``);
* ``positions`` / ``retrive_*`` hold exactly ``bs*n`` cells, every token cell inside;
* a ``kv_indptr`` row holds exactly the entries the build writes (0 .. num_seqs*K);
* ``kv_indices`` may be narrower than int64 only if ``req_to_token`` is too: a copied
  slot number always fits.
"""

from __future__ import annotations

import z3

from specbound import spec

from . import core
from . import lemmas
from .model import K, b, bs, in_batch, labelled, n, num_seqs, t
from .theorem import Mutant, Theorem

FAMILY = "conventions"
kv_bits, r2t_bits, v = z3.Ints("kv_bits r2t_bits v")


def _a_dtype_width(x):
    return z3.Or(*[x == w for w in spec.INT_WIDTHS])


def conv_bitpack_item_minimal() -> Theorem:
    def claim(d):
        w = d.bitpack_item_bits(n)
        return z3.And(z3.Or(w == 8, w == 16, w == 32), n <= w, z3.Or(w == 8, 2 * n > w))
    return Theorem(
        id="CONV-BITPACK-ITEM-MINIMAL", family=FAMILY,
        statement="1 <= n <= 32 => bitpack_item_bits(n) is 8, 16 or 32, holds n bits, and half of it would not",
        hyps=lambda d: {**labelled(spec.bitpack_ok(n)), "draft_tokens_positive": n >= 1},
        claim=claim,
        report=lambda: {"n": n},
        mutants=(Mutant("MUT-BITPACK-16-FOR-SMALL-N", "16-bit items for n <= 8",
                        overrides={"bitpack_item_bits": lambda nn: spec.ite(nn <= 16, 16, 32)}),
                 Mutant("MUT-BITPACK-ALWAYS-32", "32-bit items whatever n",
                        overrides={"bitpack_item_bits": lambda nn: 32})),
    )


def conv_token_numel_exact() -> Theorem:
    def claim(d):
        cell = d.token_cell(b, t, n)
        return z3.And(0 <= cell, cell < d.token_numel(bs, n),
                      d.token_cell(bs - 1, n - 1, n) + 1 == d.token_numel(bs, n))
    return Theorem(
        id="CONV-TOKEN-NUMEL-EXACT", family=FAMILY,
        statement=("every token cell b*n + t of a batch is inside token_numel(bs, n), and the last one "
                   "is its final cell (positions and retrive_* are exactly bs*n cells)"),
        hyps=lambda d: {"draft_tokens_positive": n >= 1, "request_in_batch[b]": in_batch(b),
                        "node_in_tree": z3.And(0 <= t, t < n)},
        claim=claim,
        report=lambda: {"bs": bs, "n": n, "b": b, "t": t},
        mutants=(Mutant("MUT-TOKEN-NUMEL-SHORT", "token outputs one cell short",
                        overrides={"token_numel": lambda bb, nn: bb * nn - 1}),
                 Mutant("MUT-TOKEN-NUMEL-ROW-PER-REQUEST", "one row too many (bs + 1 rows)",
                        overrides={"token_numel": lambda bb, nn: (bb + 1) * nn})),
    )


def conv_kv_indptr_row() -> Theorem:
    z_end = b * K + t + 1      # the entry branch z = b*K + t writes: where its segment ends

    def claim(d):
        length = d.kv_indptr_row_len(num_seqs, K)
        last = (num_seqs - 1) * K + (K - 1) + 1
        return z3.And(0 < length, 0 <= z_end, z_end < length, last + 1 == length)
    return Theorem(
        id="CONV-KV-INDPTR-ROW", family=FAMILY,
        statement=("a kv_indptr row holds entry 0 and the entry b*K + t + 1 of every branch (b, t), and its "
                   "last entry is the last branch's: kv_indptr_row_len = num_seqs*K + 1, exactly"),
        hyps=lambda d: {"topk_positive": K >= 1, "request_in_batch[b]": in_batch(b, num_seqs),
                        "branch_in_request[b]": z3.And(0 <= t, t < K)},
        claim=claim,
        report=lambda: {"num_seqs": num_seqs, "K": K, "b": b, "t": t},
        lemmas=lambda: [core.instantiate(lemmas.mul_le_mono(), b + 1, num_seqs, K)],
        mutants=(Mutant("MUT-INDPTR-NO-ENTRY-0", "rows of num_seqs*K entries (no room for entry 0)",
                        overrides={"kv_indptr_row_len": lambda s, k: s * k}),
                 Mutant("MUT-INDPTR-SPARE-ENTRY", "rows of num_seqs*K + 2 entries",
                        overrides={"kv_indptr_row_len": lambda s, k: s * k + 2})),
    )


def conv_kv_copy_lossless() -> Theorem:
    def claim(d):
        fits = z3.And(-d.signed_bound(kv_bits) <= v, v < d.signed_bound(kv_bits))
        return z3.Implies(d.kv_copy_lossless(kv_bits, r2t_bits), fits)
    return Theorem(
        id="CONV-KV-COPY-LOSSLESS", family=FAMILY,
        statement=("a slot number v of req_to_token (r2t_bits wide) copied into kv_indices (kv_bits wide) "
                   "is never truncated when kv_copy_lossless(kv_bits, r2t_bits)"),
        hyps=lambda d: {"kv_bits_is_a_dtype_width": _a_dtype_width(kv_bits),
                        "r2t_bits_is_a_dtype_width": _a_dtype_width(r2t_bits),
                        "slot_fits_req_to_token": z3.And(-d.signed_bound(r2t_bits) <= v, v < d.signed_bound(r2t_bits))},
        claim=claim,
        report=lambda: {"kv_bits": kv_bits, "r2t_bits": r2t_bits, "v": v},
        mutants=(Mutant("MUT-KV-INT32-ALWAYS", "int32 kv_indices accepted whatever req_to_token holds",
                        overrides={"kv_copy_lossless": lambda kb, rb: kb >= 32}),),
    )


THEOREMS = (conv_bitpack_item_minimal, conv_token_numel_exact, conv_kv_indptr_row, conv_kv_copy_lossless)
