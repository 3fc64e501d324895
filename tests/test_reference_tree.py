"""Reference tree build: golden vectors, layouts, strict mode, footprint, bad inputs.

Expected values are written out by hand (from the ancestor relation of each tree);
the layouts are re-derived here independently of the spec, on purpose.
"""

import numpy as np
import pytest
import torch

from specbound import spec
from specbound.reference import MalformedTreeError, build_tree, mask_dtype
from specbound.reference.samples import random_tree_batch
from specbound.spec import SpecArgumentError, SpecTypeError, TreeMaskMode

FULL, QLEN, BITS = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING
MODES = (FULL, QLEN, BITS)

# --- golden vector (sglang's tree-build unit test) -----------------------------------
G_K, G_D, G_N = 4, 4, 8
G_SEQ = [5, 10]
G_SEL = [[0, 1, 4, 8, 20, 24, 36], [0, 4, 5, 6, 7, 24, 36]]
G_PL = [[-1, 0, 1, 2, 3, 4, 8, 9, 10, 20, 24, 21, 28], [-1, 0, 1, 2, 3, 4, 5, 6, 7, 24, 28, 20, 21]]
# Parents worked out by hand: node j+1 = sel[j]; slot sel//4; parent = node whose sel is pl[slot].
G_PARENTS = [[None, 0, 0, 1, 2, 3, 4, 5], [None, 0, 1, 1, 1, 1, 3, 6]]
G_POSITIONS = [5, 6, 6, 7, 7, 8, 8, 9, 10, 11, 12, 12, 12, 12, 13, 14]
G_NEXT_TOKEN = [[1, 3, 4, 5, 6, 7, -1, -1], [1, 2, -1, 6, -1, -1, 7, -1]]
G_NEXT_SIBLING = [[-1, 2, -1, -1, -1, -1, -1, -1], [-1, -1, 3, 4, 5, -1, -1, -1]]


def expected_rows(parents):
    """Mask rows from the ancestor relation: root, self and every ancestor."""
    rows = []
    for t in range(len(parents)):
        row = [0] * len(parents)
        row[0] = row[t] = 1
        p = parents[t]
        while p is not None:
            row[p] = 1
            p = parents[p]
        rows.append(row)
    return rows


def read_rows(mask, mode, b, n, seq_lens):
    """The n x n tree part of request b's mask, read with the layouts of background §2."""
    mask = mask.tolist()
    if mode is QLEN:
        base = b * n * n
        return [[int(mask[base + t * n + c]) for c in range(n)] for t in range(n)]
    if mode is FULL:
        s = seq_lens[b]
        base = n * sum(seq_lens[:b]) + b * n * n
        return [[int(mask[base + (s + n) * t + s + c]) for c in range(n)] for t in range(n)]
    return [[(int(mask[b * n + t]) >> c) & 1 for c in range(n)] for t in range(n)]


def golden(mode, **kw):
    return build_tree(torch.tensor(G_PL), torch.tensor(G_SEL), torch.tensor(G_SEQ), topk=G_K, depth=G_D,
                      num_draft_tokens=G_N, mode=mode, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_golden_vector(mode):
    out = golden(mode)
    assert out.positions.tolist() == G_POSITIONS
    assert out.retrive_index.tolist() == [list(range(8)), list(range(8, 16))]
    assert out.retrive_next_token.tolist() == G_NEXT_TOKEN
    assert out.retrive_next_sibling.tolist() == G_NEXT_SIBLING
    for b in range(2):
        assert read_rows(out.tree_mask, mode, b, G_N, G_SEQ) == expected_rows(G_PARENTS[b])
    if mode is FULL:
        assert out.tree_mask.numel() == sum(G_SEQ) * 8 + 2 * 64
        # The prefix columns are filled True by default (the caller's fill).
        m = out.tree_mask.tolist()
        for b, s in enumerate(G_SEQ):
            base = 8 * sum(G_SEQ[:b]) + b * 64
            for t in range(8):
                assert all(m[base + (s + 8) * t + c] for c in range(s))
    elif mode is QLEN:
        assert out.tree_mask.dtype == torch.bool and out.tree_mask.numel() == 2 * 64
    else:
        assert out.tree_mask.dtype == torch.uint8 and out.tree_mask.numel() == 16


@pytest.mark.parametrize("mode", MODES)
def test_hand_case(mode):
    out = build_tree(torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([5]), topk=2,
                     depth=2, num_draft_tokens=4, mode=mode)
    assert out.retrive_next_token.tolist() == [[1, 3, -1, -1]]
    assert out.retrive_next_sibling.tolist() == [[-1, 2, -1, -1]]
    assert out.positions.tolist() == [5, 6, 6, 7]
    assert out.retrive_index.tolist() == [[0, 1, 2, 3]]
    rows = ["".join(str(v) for v in r) for r in read_rows(out.tree_mask, mode, 0, 4, [5])]
    assert rows == ["1000", "1100", "1010", "1101"]
    if mode is BITS:
        assert out.tree_mask.tolist() == [0b0001, 0b0011, 0b0101, 0b1011]


def test_full_mask_prefix_left_alone_without_fill():
    mask = torch.zeros(sum(G_SEQ) * 8 + 2 * 64, dtype=torch.bool)
    golden(FULL, tree_mask=mask, fill_prefix_mask=False)
    m = mask.tolist()
    for b, s in enumerate(G_SEQ):
        base = 8 * sum(G_SEQ[:b]) + b * 64
        for t in range(8):
            assert not any(m[base + (s + 8) * t + c] for c in range(s))


def test_bitpacking_item_width_follows_n():
    # n = 9 needs 16-bit items, n = 17 needs 32-bit ones; K=4, D=3 has 36 score slots.
    for n, dtype in ((9, torch.uint16), (17, torch.uint32), (33, None)):
        pl, sel, sl = random_tree_batch(np.random.default_rng(n), 3, 4, 3, n)
        if dtype is None:
            with pytest.raises(SpecArgumentError) as e:
                build_tree(pl, sel, sl, topk=4, depth=3, num_draft_tokens=n, mode=BITS)
            assert e.value.argument == "num_draft_tokens"
            continue
        out = build_tree(pl, sel, sl, topk=4, depth=3, num_draft_tokens=n, mode=BITS)
        assert out.tree_mask.dtype == dtype
        ref = build_tree(pl, sel, sl, topk=4, depth=3, num_draft_tokens=n, mode=QLEN)
        for b in range(3):
            assert read_rows(out.tree_mask, BITS, b, n, None) == read_rows(ref.tree_mask, QLEN, b, n, None)


def test_bitpacking_writes_whole_items():
    # A dirty preallocated buffer: every item is overwritten, nothing ORed into old bits.
    mask = torch.full((16,), 0xFF, dtype=torch.uint8)
    clean = golden(BITS).tree_mask
    golden(BITS, tree_mask=mask)
    assert mask.tolist() == clean.tolist()


def test_links_written_in_full_without_prefill():
    junk = {name: torch.full((2, 8), 77, dtype=torch.int64)
            for name in ("retrive_index", "retrive_next_token", "retrive_next_sibling")}
    out = golden(QLEN, **junk)
    assert out.retrive_next_token.tolist() == G_NEXT_TOKEN
    assert out.retrive_next_sibling.tolist() == G_NEXT_SIBLING


def test_depth_one_empty_parent_list():
    # D = 1: every node is a child of the root; parent_list is (bs, 0).
    out = build_tree(torch.zeros((2, 0), dtype=torch.int64), torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]]),
                     torch.tensor([3, 0]), topk=4, depth=1, num_draft_tokens=5, mode=QLEN)
    assert out.positions.tolist() == [3, 4, 4, 4, 4, 0, 1, 1, 1, 1]
    assert out.retrive_next_token.tolist() == [[1, -1, -1, -1, -1]] * 2
    assert out.retrive_next_sibling.tolist() == [[-1, 2, 3, 4, -1]] * 2
    star = [None, 0, 0, 0, 0]
    assert read_rows(out.tree_mask, QLEN, 1, 5, None) == expected_rows(star)


@pytest.mark.parametrize("mode", MODES)
def test_topk_one_chain(mode):
    # K = 1 forces n = D + 1: a chain 0 <- 1 <- 2 <- 3.
    out = build_tree(torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]), torch.tensor([4]), topk=1,
                     depth=3, num_draft_tokens=4, mode=mode)
    assert out.positions.tolist() == [4, 5, 6, 7]
    assert out.retrive_next_token.tolist() == [[1, 2, 3, -1]]
    assert out.retrive_next_sibling.tolist() == [[-1, -1, -1, -1]]
    assert read_rows(out.tree_mask, mode, 0, 4, [4]) == expected_rows([None, 0, 1, 2])


def test_single_node_tree_and_empty_batch():
    out = build_tree(torch.zeros((2, 3), dtype=torch.int64), torch.zeros((2, 0), dtype=torch.int64),
                     torch.tensor([2, 0]), topk=2, depth=2, num_draft_tokens=1, mode=FULL)
    assert out.positions.tolist() == [2, 0]
    assert out.tree_mask.tolist() == [True] * 3 + [True]
    empty = build_tree(torch.zeros((0, 3), dtype=torch.int64), torch.zeros((0, 3), dtype=torch.int64),
                       torch.zeros(0, dtype=torch.int64), topk=2, depth=2, num_draft_tokens=4, mode=QLEN)
    assert empty.tree_mask.numel() == 0 and empty.retrive_index.shape == (0, 4)


def test_numpy_inputs_accepted():
    out = build_tree(np.array(G_PL), np.array(G_SEL), np.array(G_SEQ, dtype=np.int32), topk=G_K, depth=G_D,
                     num_draft_tokens=G_N, mode="qlen_only")
    assert out.positions.tolist() == G_POSITIONS


def test_random_valid_trees_match_ancestor_relation():
    rng = np.random.default_rng(7)
    for k, d, n in ((4, 5, 8), (2, 3, 7), (1, 4, 5), (3, 2, 10)):
        pl, sel, sl = random_tree_batch(rng, 5, k, d, n)
        out = build_tree(pl, sel, sl, topk=k, depth=d, num_draft_tokens=n, mode=QLEN, strict=True)
        for b in range(5):
            # Parents by direct search, written here independently of the spec.
            sel_b, pl_b = sel[b].tolist(), pl[b].tolist()
            parents = [None] + [0 if v // k == 0 else sel_b.index(pl_b[v // k]) + 1 for v in sel_b]
            rows = expected_rows(parents)
            assert read_rows(out.tree_mask, QLEN, b, n, None) == rows
            assert out.positions[b * n:(b + 1) * n].tolist() == [int(sl[b]) + sum(r) - 1 for r in rows]


# --- strict mode: one test per defect ------------------------------------------------

def _strict(sel, pl, k, d, n, strict=True):
    return build_tree(torch.tensor([pl]), torch.tensor([sel]), torch.tensor([3]), topk=k, depth=d,
                      num_draft_tokens=n, mode=QLEN, strict=strict)


STRICT_CASES = {
    # slot 7 // 2 = 3 is outside a parent_list row of width 3
    "parent index out of range": ([0, 1, 7], [-1, 0, 1], 2, 2, 4, 3),
    # a negative entry has no slot at all
    "parent index out of range (negative)": ([0, -1, 2], [-1, 0, 1], 2, 2, 4, 2),
    # parent_list names token 9, which no selected_index entry holds
    "missing parent": ([0, 1, 2], [-1, 9, 1], 2, 2, 4, 3),
    # node 1's parent is node 3 and node 3's parent is node 1
    "cycle": ([2, 3, 4], [-1, 4, 2, 0, 0], 2, 3, 4, 1),
    # node 2's parent is node 3 (3 > 2) and node 3's parent is node 1: no cycle
    "node ids not increasing": ([0, 4, 6], [-1, 0, 6, 0, 0], 2, 3, 4, 2),
    # a chain 1 <- 2 <- 3 three levels deep in a depth-2 tree
    "too deep": ([0, 2, 4], [-1, 0, 2], 2, 2, 4, 3),
}


@pytest.mark.parametrize("case", sorted(STRICT_CASES))
def test_strict_defects(case):
    sel, pl, k, d, n, node = STRICT_CASES[case]
    defect = case.split(" (")[0]
    mask = torch.full((n * n,), True)
    with pytest.raises(MalformedTreeError) as e:
        build_tree(torch.tensor([pl]), torch.tensor([sel]), torch.tensor([3]), topk=k, depth=d,
                   num_draft_tokens=n, mode=QLEN, strict=True, tree_mask=mask)
    err = e.value
    assert (err.request, err.node, err.defect) == (0, node, defect)
    assert str(err).split(":")[0] in ("selected_index", "parent_list")
    assert f"request 0, node {node}: {defect}" in str(err)
    assert mask.all()  # nothing written
    # Without strict the guarded semantics build something, and terminate (cycles included).
    _strict(sel, pl, k, d, n, strict=False)


def test_strict_names_the_request():
    sel = torch.tensor([[0, 1, 2], [0, 1, 2]])
    pl = torch.tensor([[-1, 0, 1], [-1, 9, 1]])
    with pytest.raises(MalformedTreeError, match="request 1, node 3: missing parent"):
        build_tree(pl, sel, torch.tensor([1, 1]), topk=2, depth=2, num_draft_tokens=4, mode=FULL, strict=True)


def test_guarded_semantics_on_malformed_trees():
    # Too deep: the walk stops after D = 2 marks, so node 3 sees nodes 3 and 2 only.
    out = _strict([0, 2, 4], [-1, 0, 2], 2, 2, 4, strict=False)
    assert read_rows(out.tree_mask, QLEN, 0, 4, None)[3] == [1, 0, 1, 1]
    assert out.positions.tolist() == [3, 4, 5, 5]
    # Missing parent: node 3 gets no links and its row is root + itself.
    out = _strict([0, 1, 2], [-1, 9, 1], 2, 2, 4, strict=False)
    assert out.retrive_next_token.tolist() == [[1, -1, -1, -1]]
    assert out.retrive_next_sibling.tolist() == [[-1, 2, -1, -1]]
    assert read_rows(out.tree_mask, QLEN, 0, 4, None)[3] == [1, 0, 0, 1]


# --- footprint: the cells written equal the spec's -----------------------------------

def _written(run, make):
    """Cells a run writes: run twice on buffers pre-filled with two different sentinels;
    a cell the run does not write keeps its sentinel, so the two runs differ there."""
    a, b = make(0), make(1)
    run(a)
    run(b)
    return {name: set(torch.nonzero(a[name].reshape(-1) == b[name].reshape(-1)).flatten().tolist())
            for name in a}


def _random_tree_inputs(rng, bs, k, d, n, garbage):
    if not garbage:
        return random_tree_batch(rng, bs, k, d, n, max_seq_len=9)
    width = spec.parent_list_width(k, d)
    sel = torch.from_numpy(rng.integers(-3, 3 * spec.score_list_len(k, d), size=(bs, n - 1)))
    pl = torch.from_numpy(rng.integers(-3, 3 * spec.score_list_len(k, d), size=(bs, width)))
    return pl, sel, torch.from_numpy(rng.integers(0, 10, size=bs))


@pytest.mark.parametrize("garbage", [False, True], ids=["valid", "malformed"])
@pytest.mark.parametrize("mode", MODES)
def test_footprint_matches_spec(mode, garbage):
    rng = np.random.default_rng(int(mode) * 10 + garbage)
    for _ in range(6):
        k, d = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        n = int(rng.integers(1, min(spec.score_list_len(k, d) + 1, 10) + 1))
        bs = int(rng.integers(0, 4))
        pl, sel, sl = _random_tree_inputs(rng, bs, k, d, n, garbage)
        seq = sl.tolist()
        numel = spec.mask_batch_numel(mode, bs, n, sum(seq)) + 11   # a larger preallocated buffer
        dtype = mask_dtype(mode, n)

        def make(which):
            fill = (False, True)[which] if dtype == torch.bool else (0x5A, 0xA5)[which]
            tok = (-7, -9)[which]
            return {"tree_mask": torch.full((numel,), fill, dtype=dtype),
                    "positions": torch.full((bs * n + 5,), tok),
                    "retrive_index": torch.full((bs + 2, n), tok),
                    "retrive_next_token": torch.full((bs + 2, n), tok),
                    "retrive_next_sibling": torch.full((bs + 2, n), tok)}

        for fill_prefix in (True, False):
            def run(bufs):
                build_tree(pl, sel, sl, topk=k, depth=d, num_draft_tokens=n, mode=mode,
                           fill_prefix_mask=fill_prefix, **bufs)
            got = _written(run, make)
            want_mask = spec.mask_kernel_cells(mode, n, seq)
            if fill_prefix:
                want_mask |= spec.mask_fill_cells(mode, n, seq)
            assert got["tree_mask"] == want_mask
            for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
                assert got[name] == spec.token_cells(bs, n), name


# --- bad inputs: the argument is named, nothing is written ---------------------------

def _buffers(mode=QLEN, bs=2, n=8):
    numel = spec.mask_batch_numel(mode, bs, n, sum(G_SEQ))
    dtype = torch.uint8 if mode is BITS else torch.bool
    return {"tree_mask": torch.full((numel,), 1, dtype=dtype),
            "positions": torch.full((bs * n,), -5),
            "retrive_index": torch.full((bs, n), -5),
            "retrive_next_token": torch.full((bs, n), -5),
            "retrive_next_sibling": torch.full((bs, n), -5)}


def _call(overrides=None, mode=QLEN, buffers=None, **kw):
    args = {"parent_list": torch.tensor(G_PL), "selected_index": torch.tensor(G_SEL),
            "seq_lens": torch.tensor(G_SEQ)}
    params = {"topk": G_K, "depth": G_D, "num_draft_tokens": G_N, "mode": mode}
    params.update(kw)
    bufs = dict(buffers or {})
    for key, value in (overrides or {}).items():
        if key in args:
            args[key] = value
        else:
            bufs[key] = value
    return build_tree(args["parent_list"], args["selected_index"], args["seq_lens"], **params, **bufs)


BAD = [
    # (id, overrides, extra params, error class, argument)
    ("float selected_index", {"selected_index": torch.tensor(G_SEL, dtype=torch.float32)}, {}, SpecTypeError,
     "selected_index"),
    ("bool seq_lens", {"seq_lens": torch.tensor([True, False])}, {}, SpecTypeError, "seq_lens"),
    ("list parent_list", {"parent_list": G_PL}, {}, SpecTypeError, "parent_list"),
    ("numpy float", {"selected_index": np.array(G_SEL, dtype=np.float64)}, {}, SpecTypeError, "selected_index"),
    ("rank seq_lens", {"seq_lens": torch.tensor([G_SEQ])}, {}, SpecArgumentError, "seq_lens"),
    ("shape selected_index", {"selected_index": torch.zeros((2, 8), dtype=torch.int64)}, {},
     SpecArgumentError, "selected_index"),
    ("shape parent_list", {"parent_list": torch.zeros((2, 12), dtype=torch.int64)}, {}, SpecArgumentError,
     "parent_list"),
    ("batch mismatch", {"parent_list": torch.zeros((3, 13), dtype=torch.int64)}, {}, SpecArgumentError,
     "parent_list"),
    ("negative seq_len", {"seq_lens": torch.tensor([5, -1])}, {}, SpecArgumentError, "seq_lens"),
    ("input device", {"parent_list": torch.zeros((2, 13), dtype=torch.int64, device="meta")}, {},
     SpecArgumentError, "parent_list"),
    ("topk zero", {}, {"topk": 0}, SpecArgumentError, "topk"),
    ("depth negative", {}, {"depth": -1}, SpecArgumentError, "depth"),
    ("topk bool", {}, {"topk": True}, SpecTypeError, "topk"),
    ("depth float", {}, {"depth": 4.0}, SpecTypeError, "depth"),
    ("n too large for the scores", {}, {"topk": 2, "depth": 2, "num_draft_tokens": 8}, SpecArgumentError,
     "num_draft_tokens"),
    ("unknown mode int", {}, {"mode": 7}, SpecArgumentError, "mode"),
    ("unknown mode name", {}, {"mode": "tree"}, SpecArgumentError, "mode"),
    ("mode float", {}, {"mode": 1.0}, SpecTypeError, "mode"),
    ("mode bool", {}, {"mode": True}, SpecTypeError, "mode"),
    ("fill_prefix_mask int", {}, {"fill_prefix_mask": 1}, SpecTypeError, "fill_prefix_mask"),
    ("strict None", {}, {"strict": None}, SpecTypeError, "strict"),
    ("mask dtype", {"tree_mask": torch.zeros(128, dtype=torch.int8)}, {}, SpecTypeError, "tree_mask"),
    ("mask device", {"tree_mask": torch.zeros(128, dtype=torch.bool, device="meta")}, {}, SpecArgumentError,
     "tree_mask"),
    ("mask rank", {"tree_mask": torch.zeros((2, 64), dtype=torch.bool)}, {}, SpecArgumentError, "tree_mask"),
    ("mask too small", {"tree_mask": torch.zeros(127, dtype=torch.bool)}, {}, SpecArgumentError, "tree_mask"),
    ("mask non-contiguous", {"tree_mask": torch.zeros(256, dtype=torch.bool)[::2]}, {}, SpecArgumentError,
     "tree_mask"),
    ("positions dtype", {"positions": torch.zeros(16, dtype=torch.int32)}, {}, SpecTypeError, "positions"),
    ("positions too small", {"positions": torch.zeros(15, dtype=torch.int64)}, {}, SpecArgumentError,
     "positions"),
    ("retrive rank", {"retrive_index": torch.zeros(16, dtype=torch.int64)}, {}, SpecArgumentError,
     "retrive_index"),
    ("retrive row width", {"retrive_next_token": torch.zeros((4, 4), dtype=torch.int64)}, {},
     SpecArgumentError, "retrive_next_token"),
    ("retrive too few rows", {"retrive_next_sibling": torch.zeros((1, 8), dtype=torch.int64)}, {},
     SpecArgumentError, "retrive_next_sibling"),
    ("retrive non-contiguous", {"retrive_next_token": torch.zeros((8, 2), dtype=torch.int64).t()}, {},
     SpecArgumentError, "retrive_next_token"),
    ("retrive not a tensor", {"retrive_index": np.zeros((2, 8), dtype=np.int64)}, {}, SpecTypeError,
     "retrive_index"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_named_and_nothing_written(case):
    _, overrides, params, cls, argument = case
    bufs = _buffers()
    # Any buffer the case replaces is not one of the sentinel-filled ones we check.
    kept = {k: v for k, v in bufs.items() if k not in overrides}
    snapshot = {k: v.clone() for k, v in kept.items()}
    with pytest.raises(cls) as e:
        _call(overrides, buffers=kept, **params)
    assert e.value.argument == argument
    assert str(e.value).startswith(argument)
    for k, v in kept.items():
        assert torch.equal(v, snapshot[k]), k


def test_bitpacking_mask_dtype_checked():
    with pytest.raises(SpecTypeError) as e:
        _call({"tree_mask": torch.zeros(16, dtype=torch.bool)}, mode=BITS)
    assert e.value.argument == "tree_mask"
    with pytest.raises(SpecTypeError, match="torch.uint8"):
        _call({"tree_mask": torch.zeros(16, dtype=torch.uint16)}, mode=BITS)


def test_aliased_outputs_rejected():
    bufs = _buffers()
    bufs["retrive_next_sibling"] = bufs["retrive_next_token"]
    before = bufs["retrive_next_token"].clone()
    with pytest.raises(SpecArgumentError) as e:
        _call(buffers=bufs)
    assert e.value.argument == "retrive_next_sibling"
    assert torch.equal(bufs["retrive_next_token"], before)


def test_full_mask_buffer_too_small_is_caught_before_any_write():
    # The #29450 shape: a FULL_MASK buffer sized without the +n term.
    bufs = _buffers(FULL)
    bufs["tree_mask"] = torch.zeros(sum(G_SEQ) * 8 + 2 * 8, dtype=torch.bool)
    snapshot = {k: v.clone() for k, v in bufs.items()}
    with pytest.raises(SpecArgumentError, match=r"tree_mask: too small for the batch: needs 248"):
        _call(mode=FULL, buffers=bufs)
    assert all(torch.equal(v, snapshot[k]) for k, v in bufs.items())


def test_disjoint_views_of_one_buffer_only_when_asked():
    """By default outputs sharing storage are refused even where they do not intersect;
    ``disjoint_views=True`` (the sglang drop-in) accepts the three retrive outputs as views of
    one ``(3, bs, n)`` buffer, and still refuses views that overlap and an output that shares
    an input's storage."""
    from specbound.reference import validate_build_tree_args

    inputs = (torch.tensor(G_PL), torch.tensor(G_SEL), torch.tensor(G_SEQ))
    kw = {"topk": G_K, "depth": G_D, "num_draft_tokens": G_N, "mode": QLEN}
    buf = torch.full((3, 2, 8), -1)
    views = {"retrive_index": buf[0], "retrive_next_token": buf[1], "retrive_next_sibling": buf[2]}
    with pytest.raises(SpecArgumentError, match="retrive_next_token: shares storage with retrive_index"):
        validate_build_tree_args(*inputs, **kw, **views)
    args = validate_build_tree_args(*inputs, **kw, **views, disjoint_views=True)
    assert args.retrive_next_sibling.data_ptr() == buf[2].data_ptr()
    flat = torch.full((47,), -1)
    overlapping = {"retrive_index": flat[:16].view(2, 8), "retrive_next_token": flat[15:31].view(2, 8),
                   "retrive_next_sibling": flat[31:].view(2, 8)}
    with pytest.raises(SpecArgumentError, match="retrive_next_token: overlaps retrive_index in memory"):
        validate_build_tree_args(*inputs, **kw, **overlapping, disjoint_views=True)
    raw = torch.zeros(2 + 16, dtype=torch.int64)
    seq = raw[:2].copy_(torch.tensor(G_SEQ))
    with pytest.raises(SpecArgumentError, match="positions: shares storage with the input seq_lens"):
        validate_build_tree_args(inputs[0], inputs[1], seq, **kw, positions=raw[2:], disjoint_views=True)
