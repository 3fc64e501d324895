"""Reference draft-decode kv_indices: hand cases, capacity check, footprint, bad inputs."""

import numpy as np
import pytest
import torch

from specbound import spec
from specbound.reference import draft_decode_kv_indices
from specbound.spec import SpecArgumentError, SpecTypeError


def test_background_helper_numbers():
    assert spec.draft_kv_indices_used_len(100, 2, 8, 3) == 224
    assert spec.draft_kv_indices_buffer_width(4, 3, 256) == 3072
    # used_len <= width  <=>  S + num_seqs*steps <= num_seqs*C  (room for the draft tokens)
    for num_seqs in range(1, 5):
        for k in (1, 2, 3):
            for c in (4, 9):
                for s_sum in range(0, num_seqs * c + 3):
                    for steps in (1, 2, 3):
                        used = spec.draft_kv_indices_used_len(s_sum, k, num_seqs * k, steps)
                        width = spec.draft_kv_indices_buffer_width(num_seqs, k, c)
                        assert (used <= width) == (s_sum + num_seqs * steps <= num_seqs * c)


# req_to_token row r holds 1000*r + slot, so every value names the slot it came from.
def _pool(rows=2, width=20):
    return torch.arange(width).repeat(rows, 1) + 1000 * torch.arange(rows)[:, None]


def test_hand_case_page_size_one():
    # num_seqs 2, K 2, steps 2, seq_lens [3, 2]; request 0 uses pool row 1, request 1 row 0.
    # Branch t extends at seq_len + t*steps.  Segments by hand:
    # step 1: (0,0) @0: 1000 1001 1002 | 1003   (0,1) @4: 1000 1001 1002 | 1005
    #         (1,0) @8:    0    1 |    2         (1,1) @11:   0    1 |    4      used 14
    # step 2: (0,0) @0: ... | 1003 1004  (0,1) @5: ... | 1005 1006
    #         (1,0) @10: 0 1 | 2 3       (1,1) @14: 0 1 | 4 5                    used 18
    kv, indptr = draft_decode_kv_indices(torch.tensor([1, 0]), _pool(), torch.tensor([3, 2]), topk=2,
                                         num_steps=2)
    assert kv.shape == (2, 18) and kv.dtype == torch.int64
    assert kv[0].tolist() == [1000, 1001, 1002, 1003, 1000, 1001, 1002, 1005, 0, 1, 2, 0, 1, 4, -1, -1, -1, -1]
    assert kv[1].tolist() == [1000, 1001, 1002, 1003, 1004, 1000, 1001, 1002, 1005, 1006, 0, 1, 2, 3, 0, 1, 4, 5]
    assert indptr.tolist() == [[0, 4, 8, 11, 14], [0, 5, 10, 14, 18]]


def test_hand_case_paged_topk_two():
    # page 4, K 2, steps 2, seq_lens [5, 8], pool rows [0, 1].
    # request 0: last = 1, pages per branch = ceil(3/4) = 1, base 4 -> branch starts 5 and 9.
    # request 1: last = 0, pages per branch = 1, base 8 -> branch starts 8 and 12.
    kv, indptr = draft_decode_kv_indices(torch.tensor([0, 1]), _pool(), torch.tensor([5, 8]), topk=2,
                                         num_steps=2, page_size=4)
    p0 = [0, 1, 2, 3, 4]
    p1 = [1000 + i for i in range(8)]
    step1 = p0 + [5] + p0 + [9] + p1 + [1008] + p1 + [1012]
    step2 = p0 + [5, 6] + p0 + [9, 10] + p1 + [1008, 1009] + p1 + [1012, 1013]
    assert kv.shape == (2, 34)
    assert kv[0].tolist() == step1 + [-1] * 4
    assert kv[1].tolist() == step2
    assert indptr.tolist() == [[0, 6, 12, 21, 30], [0, 7, 14, 24, 34]]


def test_topk_one_paged_is_contiguous():
    # K = 1 ignores pages: the single branch extends right after the prefix.
    kv, _ = draft_decode_kv_indices(torch.tensor([0]), _pool(1), torch.tensor([5]), topk=1, num_steps=3,
                                    page_size=4)
    assert kv[2].tolist() == [0, 1, 2, 3, 4, 5, 6, 7]


def test_caller_buffers_int32_and_indptr_entry_zero_written():
    kv = torch.full((2, 40), -3, dtype=torch.int32)
    indptr = torch.full((2, 7), 99, dtype=torch.int32)
    pool = _pool().to(torch.int32)
    out_kv, out_ptr = draft_decode_kv_indices(torch.tensor([1, 0]), pool, torch.tensor([3, 2]), topk=2,
                                              num_steps=2, kv_indices=kv, kv_indptr=indptr)
    assert out_kv is kv and out_ptr is indptr
    assert indptr[:, 0].tolist() == [0, 0]          # written, not assumed zero
    assert indptr[:, 5:].eq(99).all()              # past num_seqs*K + 1: untouched
    assert kv[0, 14:].eq(-3).all() and kv[1, 18:].eq(-3).all()


def test_capacity_check_message_and_nothing_written():
    kv = torch.full((2, 33), -3, dtype=torch.int64)
    indptr = torch.full((2, 5), -3, dtype=torch.int64)
    with pytest.raises(SpecArgumentError) as e:
        draft_decode_kv_indices(torch.tensor([0, 1]), _pool(), torch.tensor([5, 8]), topk=2, num_steps=2,
                                page_size=4, kv_indices=kv, kv_indptr=indptr)
    msg = str(e.value)
    assert e.value.argument == "kv_indices" and msg.startswith("kv_indices")
    for part in ("need 34", "row width is 33", "topk=2", "num_seqs=2", "seq_lens_sum=13", "num_steps=2",
                 "draft_kv_indices_buffer_width"):
        assert part in msg, part
    assert kv.eq(-3).all() and indptr.eq(-3).all()


def test_cuda_graph_width_with_and_without_the_topk_factor():
    # sglang #27338: the row was max_bs*C, missing K.  With the spec's width a full
    # batch at the context limit fits; with the old width it is refused up front.
    max_bs, k, c, steps = 4, 3, 16, 3
    seq = torch.full((max_bs,), c - steps)
    pool = _pool(max_bs, c + k * steps)
    good = torch.zeros((steps, spec.draft_kv_indices_buffer_width(max_bs, k, c)), dtype=torch.int64)
    draft_decode_kv_indices(torch.arange(max_bs), pool, seq, topk=k, num_steps=steps, kv_indices=good)
    bad = torch.zeros((steps, max_bs * c), dtype=torch.int64)
    with pytest.raises(SpecArgumentError, match="kv_indices: draft kv_indices row too small"):
        draft_decode_kv_indices(torch.arange(max_bs), pool, seq, topk=k, num_steps=steps, kv_indices=bad)
    assert not bad.any()


def _written(run, make):
    a, b = make(0), make(1)
    run(a)
    run(b)
    return {name: set(torch.nonzero(a[name].reshape(-1) == b[name].reshape(-1)).flatten().tolist())
            for name in a}


def test_footprint_and_indptr_on_random_batches():
    rng = np.random.default_rng(3)
    for _ in range(25):
        num_seqs, k = int(rng.integers(0, 4)), int(rng.integers(1, 4))
        steps, page = int(rng.integers(1, 4)), int(rng.choice([1, 2, 4]))
        seq = rng.integers(0, 12, size=num_seqs).tolist()
        pool_width = max([spec.kv_req_to_token_span(s, k, steps, page) for s in seq], default=0) + 2
        pool = _pool(num_seqs + 1, pool_width)
        rows = torch.from_numpy(rng.permutation(num_seqs + 1)[:num_seqs])
        used = spec.draft_kv_indices_used_len(sum(seq), k, num_seqs * k, steps)
        width, stride = used + int(rng.integers(0, 4)), num_seqs * k + 1 + int(rng.integers(0, 3))

        def make(which):
            return {"kv_indices": torch.full((steps, width), (-7, -9)[which]),
                    "kv_indptr": torch.full((steps, stride), (-7, -9)[which])}

        def run(bufs):
            draft_decode_kv_indices(rows, pool, torch.tensor(seq, dtype=torch.int64), topk=k, num_steps=steps,
                                    page_size=page, **bufs)
        got = _written(run, make)
        assert got["kv_indices"] == spec.kv_indices_cells(seq, k, steps, width)
        assert got["kv_indptr"] == spec.kv_indptr_cells(num_seqs, k, steps, stride)

        kv, indptr = draft_decode_kv_indices(rows, pool, torch.tensor(seq, dtype=torch.int64), topk=k, num_steps=steps,
                                             page_size=page)
        for i in range(steps):
            iters = i + 1
            ptr = indptr[i].tolist()
            assert ptr[0] == 0 and ptr[-1] == spec.draft_kv_indices_used_len(sum(seq), k, num_seqs * k, iters)
            for b, s in enumerate(seq):
                row = pool[int(rows[b])].tolist()
                for t in range(k):
                    start = ptr[b * k + t]
                    assert ptr[b * k + t + 1] - start == s + iters
                    seg = kv[i, start:start + s + iters].tolist()
                    assert seg[:s] == row[:s]
                    # Every extension slot lies past the prefix, and branches never share one.
                    assert all(v >= s for v in seg[s:])
            ext = [v for b, s in enumerate(seq) for t in range(k)
                   for v in kv[i, ptr[b * k + t] + s:ptr[b * k + t + 1]].tolist()]
            owners = [(int(rows[b]), t) for b in range(num_seqs) for t in range(k) for _ in range(iters)]
            assert len({(o[0], v) for o, v in zip(owners, ext)}) == len(ext)


BAD = [
    ("float seq_lens", {"seq_lens": torch.tensor([3.0, 2.0])}, SpecTypeError, "seq_lens"),
    ("negative seq_len", {"seq_lens": torch.tensor([3, -2])}, SpecArgumentError, "seq_lens"),
    ("rank req_to_token", {"req_to_token": torch.arange(40)}, SpecArgumentError, "req_to_token"),
    ("pool index out of range", {"req_pool_indices": torch.tensor([1, 2])}, SpecArgumentError,
     "req_pool_indices"),
    ("pool index negative", {"req_pool_indices": torch.tensor([-1, 0])}, SpecArgumentError, "req_pool_indices"),
    ("length mismatch", {"req_pool_indices": torch.tensor([1])}, SpecArgumentError, "req_pool_indices"),
    ("req_to_token too narrow", {"req_to_token": _pool(2, 6)}, SpecArgumentError, "req_to_token"),
    ("topk zero", {"topk": 0}, SpecArgumentError, "topk"),
    ("num_steps zero", {"num_steps": 0}, SpecArgumentError, "num_steps"),
    ("page_size bool", {"page_size": True}, SpecTypeError, "page_size"),
    ("topk float", {"topk": 2.0}, SpecTypeError, "topk"),
    ("kv_indices dtype", {"kv_indices": torch.zeros((2, 18), dtype=torch.float32)}, SpecTypeError, "kv_indices"),
    ("kv_indices rows", {"kv_indices": torch.zeros((3, 18), dtype=torch.int64)}, SpecArgumentError,
     "kv_indices"),
    ("kv_indices rank", {"kv_indices": torch.zeros(36, dtype=torch.int64)}, SpecArgumentError, "kv_indices"),
    ("kv_indices device", {"kv_indices": torch.zeros((2, 18), dtype=torch.int64, device="meta")},
     SpecArgumentError, "kv_indices"),
    ("kv_indices non-contiguous", {"kv_indices": torch.zeros((18, 2), dtype=torch.int64).t()},
     SpecArgumentError, "kv_indices"),
    ("kv_indices int32 from int64 pool", {"kv_indices": torch.zeros((2, 18), dtype=torch.int32)}, SpecTypeError,
     "kv_indices"),
    ("kv_indptr too narrow", {"kv_indptr": torch.zeros((2, 4), dtype=torch.int64)}, SpecArgumentError,
     "kv_indptr"),
    ("kv_indptr rows", {"kv_indptr": torch.zeros((1, 5), dtype=torch.int64)}, SpecArgumentError, "kv_indptr"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_named_and_nothing_written(case):
    _, overrides, cls, argument = case
    args = {"req_pool_indices": torch.tensor([1, 0]), "req_to_token": _pool(), "seq_lens": torch.tensor([3, 2]),
            "topk": 2, "num_steps": 2}
    kv = torch.full((2, 18), -3, dtype=torch.int64)
    indptr = torch.full((2, 5), -3, dtype=torch.int64)
    args.update({"kv_indices": kv, "kv_indptr": indptr})
    args.update(overrides)
    with pytest.raises(cls) as e:
        draft_decode_kv_indices(args.pop("req_pool_indices"), args.pop("req_to_token"), args.pop("seq_lens"),
                                **args)
    assert e.value.argument == argument and str(e.value).startswith(argument)
    assert kv.eq(-3).all() and indptr.eq(-3).all()
