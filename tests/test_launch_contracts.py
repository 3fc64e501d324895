"""Every launch contract of our kernels is established by the code that launches them.

The kernel proofs rest on core axioms, the launch contracts of the wrappers
(``proofs/symexec/verifiers/``); docs/kernel-proofs.md ("Launch contracts") lists where each
one is established.  Here each is shown two ways:

* every launch a set of ordinary calls makes (recorded at ``LaunchPlan.launch``) meets each
  contract, evaluated twice: as written again here on ints from the axiom's reason (not
  through ``kernels/plan.py`` or ``spec``, so a change to the plan that the symbolic model
  would follow, such as a halved grid, is seen), and as the verifier's own axiom formula with
  the launch's values substituted (so every axiom the proofs use is checked, and one with no
  formula here fails).  What the tensor models assume without an axiom (contiguous tensors of
  the model's sizes, ``prefix`` holding ``P``, outputs alone in their storage) is checked too;
* a call that would break a contract the caller controls is refused before any launch, with
  nothing written.

Every check is shown red on a planted violation (:func:`test_each_check_sees_its_planted_violation`).
"""

from __future__ import annotations

import dataclasses
import functools
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET

import z3  # noqa: E402

from specbound import kernels  # noqa: E402
from specbound import reference as ref  # noqa: E402
from specbound.kernels import plan as launch_plans  # noqa: E402
from specbound.kernels.plan import LaunchPlan  # noqa: E402
from specbound.proofs.symexec.verifiers import draft_kv, fill_prefix, tree_build  # noqa: E402
from specbound.reference import samples  # noqa: E402
from specbound.spec import SpecArgumentError, TreeMaskMode  # noqa: E402

KV, TREE, FILL = "draft_kv_kernel", "build_tree_kernel", "fill_prefix_kernel"
OUTPUTS = {KV: ("kv_indices_ptr", "kv_indptr_ptr"), FILL: ("tree_mask_ptr",),
           TREE: ("tree_mask_ptr", "positions_ptr", "retrive_index_ptr", "next_token_ptr", "next_sibling_ptr")}


@dataclasses.dataclass
class Launch:
    kernel: str
    plan: LaunchPlan
    depth: int | None = None   # the tree build's D (the plan carries only what the kernel gets)


def _recorder(monkeypatch, run: bool) -> list:
    seen = []
    real = LaunchPlan.launch

    def launch(plan, kernel):
        seen.append(Launch(getattr(kernel, "fn", kernel).__name__, plan))
        if run:
            real(plan, kernel)
    monkeypatch.setattr(LaunchPlan, "launch", launch)
    return seen


@pytest.fixture
def launches(monkeypatch):
    """The wrappers' launches, recorded and not run."""
    return _recorder(monkeypatch, run=False)


# --- the contracts on ints ------------------------------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def int_contracts(launch: Launch) -> dict[str, bool]:
    """Each launch contract of the kernel, on the launch's ints, from the axiom's reason."""
    a, c, plan = launch.plan.args, launch.plan.constexprs, launch.plan
    if launch.kernel == KV:
        num_seqs, r2t = a["num_seqs"], a["req_to_token_ptr"]
        return {"batch_nonempty": num_seqs >= 1,
                "grid_is_cdiv": tuple(plan.grid) == (_cdiv(num_seqs, c["BLOCK_B"]),),
                "indptr_row_width": a["indptr_stride"] >= num_seqs * a["topk"] + 1,
                "req_to_token_contiguous": (a["r2t_stride0"], a["r2t_stride1"]) == (r2t.shape[1], 1)
                and r2t.shape[0] >= 1}
    bs = a["bs"]
    out = {"batch_nonempty": bs >= 1, "grid_is_cdiv": tuple(plan.grid) == (_cdiv(bs, c["BLOCK_B"]),)}
    if launch.kernel == TREE:
        k, n, d = a["topk"], a["n"], launch.depth
        out["DEPTH_is_walk_max_steps"] = c["DEPTH"] == d          # the walk marks at most D nodes
        out["pl_width_is_spec"] = a["pl_width"] == (0 if d == 1 else k * (d - 1) + 1)
        out["sel_width_is_spec"] = a["sel_width"] == n - 1
        if c["MODE"] == int(TreeMaskMode.QLEN_ONLY_BITPACKING):
            out["mask_item_bits"] = a["tree_mask_ptr"].element_size() * 8 == next(b for b in (8, 16, 32) if n <= b)
    return out


def model_contracts(launch: Launch) -> dict[str, bool]:
    """What the tensor models assume without an axiom: every tensor contiguous (its cells are
    flat row-major offsets) with the model's extent (inputs exactly, outputs at least), int64
    inputs but ``req_to_token``, ``prefix`` holding P (the exclusive prefix sums of seq_lens),
    and every output alone in its storage; and the lane-bound preconditions the kernels
    device_assert (``PAIRS >= D*K``, ``STEPS >= D``, ``NODES >= n``), which the block choosers meet."""
    a, c = launch.plan.args, launch.plan.constexprs
    tensors = {name: t for name, t in a.items() if isinstance(t, torch.Tensor)}
    if launch.kernel == KV:
        rows, n = a["num_steps"], a["num_seqs"]
        exact = {"req_pool_indices_ptr": n, "seq_lens_ptr": n, "prefix_ptr": n}
        least = {"kv_indices_ptr": rows * a["width"], "kv_indptr_ptr": rows * a["indptr_stride"]}
        shapes = {"kv_indices_ptr": (rows, a["width"]), "kv_indptr_ptr": (rows, a["indptr_stride"])}
    else:
        bs, n = a["bs"], a["n"]
        exact = {"seq_lens_ptr": bs, "prefix_ptr": bs}
        least = {"positions_ptr": bs * n} if launch.kernel == TREE else {}
        shapes = {}
        if launch.kernel == TREE:
            exact.update(parent_list_ptr=bs * a["pl_width"], selected_index_ptr=bs * a["sel_width"])
            shapes = {name: (bs, n) for name in OUTPUTS[TREE][2:]}
    layout = all(t.is_contiguous() for t in tensors.values()) \
        and all(tensors[name].numel() == size for name, size in exact.items()) \
        and all(tensors[name].numel() >= size for name, size in least.items()) \
        and all(tuple(tensors[name].shape) == shape for name, shape in shapes.items()) \
        and all(t.dtype == torch.int64 for name, t in tensors.items() if name in exact)
    seq = tensors["seq_lens_ptr"]
    prefix_is_p = torch.equal(tensors["prefix_ptr"], torch.cumsum(seq, 0) - seq)
    storage = lambda t: t.untyped_storage().data_ptr()
    alone = all(storage(tensors[out]) != storage(t) for out in OUTPUTS[launch.kernel] for name, t in tensors.items()
                if name != out and t.numel() and tensors[out].numel())
    lanes = c["PAIRS"] >= a["num_steps"] * a["topk"] and c["STEPS"] >= a["num_steps"] if launch.kernel == KV \
        else c["NODES"] >= a["n"]
    return {"tensor_layout": layout, "prefix_is_P": prefix_is_p, "outputs_alone": alone, "lane_bounds": lanes}


# --- the verifiers' own axioms at the launch's values -------------------------------------------

VERIFIERS = {KV: draft_kv, TREE: tree_build, FILL: fill_prefix}


def _spec_of(launch: Launch):
    c = launch.plan.constexprs
    if launch.kernel == KV:
        dtype = lambda name: str(launch.plan.args[name].dtype).removeprefix("torch.")
        return draft_kv.KvSpec(c["BLOCK_B"], c["PAIRS"], c["STEPS"], c["BLOCK_C"], dtype("kv_indices_ptr"),
                               dtype("kv_indptr_ptr"))
    if launch.kernel == TREE:
        return tree_build.TreeSpec(c["MODE"], c["DEPTH"], c["BLOCK_B"], c["NODES"])
    return fill_prefix.FillSpec(c["BLOCK_B"], c["NODES"], c["BLOCK_C"])


@functools.lru_cache(maxsize=None)
def _axioms(kernel: str, sp) -> dict:
    run = VERIFIERS[kernel].symbolic_run(sp)
    return {name: ax.formula for proof in run.axioms for name, ax in proof.axioms.items()}


def _values(launch: Launch) -> dict[str, int]:
    """The launch's value of every constant the contracts mention (the model's names)."""
    a = launch.plan.args
    values = {"grid": launch.plan.grid[0]}
    if launch.kernel == KV:
        r2t = a["req_to_token_ptr"]
        values.update(num_seqs=a["num_seqs"], K=a["topk"], D=a["num_steps"], indptr_stride=a["indptr_stride"],
                      r2t_stride0=a["r2t_stride0"], r2t_stride1=a["r2t_stride1"], r2t_width=r2t.shape[1],
                      pool_rows=r2t.shape[0])
    else:
        values.update(bs=a["bs"], n=a["n"])
        if launch.kernel == TREE:
            values.update(K=a["topk"], D=launch.depth, pl_width=a["pl_width"], sel_width=a["sel_width"])
    return values


def proof_contracts(launch: Launch) -> dict[str, bool]:
    """The verifier's axioms for the launch's specialization, at the launch's values."""
    subst = [(z3.Int(name), z3.IntVal(v)) for name, v in _values(launch).items()]
    out = {}
    for name, formula in _axioms(launch.kernel, _spec_of(launch)).items():
        value = z3.simplify(z3.substitute(formula, *subst))
        assert z3.is_true(value) or z3.is_false(value), \
            f"{launch.kernel}: {name} keeps a term no launch value names: {value}"
        out[name] = z3.is_true(value)
    return out


def broken(launch: Launch) -> list[str]:
    """Every contract the launch breaks: ``name`` (ints or model), ``proof:name`` (the verifier's)."""
    ints, proved = int_contracts(launch), proof_contracts(launch)
    assert set(proved) <= set(ints), f"{launch.kernel}: axioms with no formula here: {set(proved) - set(ints)}"
    checks = {**ints, **model_contracts(launch), **{f"proof:{name}": ok for name, ok in proved.items()}}
    return sorted(name for name, ok in checks.items() if not ok)


# --- ordinary calls ---------------------------------------------------------------------------

def _calls(launches) -> list[Launch]:
    """Launches of a spread of calls: one to 17 requests, one to many programs, every mask layout,
    depth 1 to 4, n 1 to 17, page sizes 1 to 64, int32 and int64 tables and outputs."""
    out, rng = [], random.Random(23)
    for num_seqs, k, steps, page, dtype, budget in ((1, 1, 1, 1, torch.int64, None), (3, 2, 3, 4, torch.int32, None),
                                                    (7, 4, 5, 1, torch.int32, 512), (17, 2, 2, 16, torch.int64, 256),
                                                    (5, 8, 3, 64, torch.int64, 2048)):
        batch = samples.random_kv_batch(rng, num_seqs, k, steps, page, max_seq_len=40, dtype=dtype)
        kv = None if dtype == torch.int64 else torch.full((steps, 4096), -1, dtype=torch.int32)
        kernels.draft_decode_kv_indices(*batch, topk=k, num_steps=steps, page_size=page, kv_indices=kv,
                                        tile_budget=budget)
    for mode in TreeMaskMode:
        for bs, k, d, n, budget in ((1, 1, 1, 1, None), (5, 2, 3, 6, 64), (3, 4, 2, 9, None), (9, 4, 4, 17, 512)):
            if mode is TreeMaskMode.QLEN_ONLY_BITPACKING and n > 32:
                continue
            start = len(launches)
            batch = samples.random_tree_batch(rng, bs, k, d, n, max_seq_len=20)
            kernels.build_tree(*batch, topk=k, depth=d, num_draft_tokens=n, mode=mode, tile_budget=budget)
            for launch in launches[start:]:
                launch.depth = d
    return list(launches)


def test_every_launch_meets_every_contract(launches):
    made = _calls(launches)
    assert {launch.kernel for launch in made} == {KV, TREE, FILL}
    assert any(launch.plan.grid[0] > 1 for launch in made)
    for launch in made:
        assert broken(launch) == [], (launch.kernel, launch.plan.grid, launch.plan.constexprs)


def test_empty_batches_launch_nothing(launches):
    """batch_nonempty: the wrappers return before launching an empty batch."""
    empty = torch.zeros(0, dtype=torch.int64)
    kernels.draft_decode_kv_indices(empty, samples.req_to_token(2, 8), empty, topk=2, num_steps=3)
    for mode in TreeMaskMode:
        kernels.build_tree(torch.zeros(0, 5, dtype=torch.int64), torch.zeros(0, 3, dtype=torch.int64), empty,
                           topk=2, depth=3, num_draft_tokens=4, mode=mode)
    assert launches == []


# --- req_to_token_contiguous ---------------------------------------------------------------------

POOL, SEQ, K, STEPS = [1, 0, 3], [3, 5, 2], 2, 3   # reads at most 11 slots of a 16-wide row


def _strided_views(dtype) -> dict:
    table = lambda rows, width: samples.req_to_token(rows, width, dtype)
    return {"column slice": table(4, 24)[:, :16], "every other column": table(4, 32)[:, ::2],
            "transposed": table(16, 4).t(), "one row repeated": table(1, 16).expand(4, 16)}


def _kv_buffers(r2t):
    """Caller outputs of the right size, filled with -7 (so any write shows)."""
    ind, ptr = ref.draft_decode_kv_indices(torch.tensor(POOL), r2t.contiguous(), torch.tensor(SEQ), topk=K,
                                           num_steps=STEPS)
    return torch.full_like(ind, -7), torch.full_like(ptr, -7)


def _bytes(t):
    """A copy of ``t``'s elements as bytes (torch compares few unsigned dtypes)."""
    return t.contiguous().reshape(-1).view(torch.uint8).clone()


def _refused_alike(builds, args, kw, argument: str, condition: str, untouched: dict, launches) -> None:
    """Both builds refuse naming ``argument`` and ``condition``, launch nothing, write nothing."""
    before = {name: _bytes(t) for name, t in untouched.items()}
    messages = set()
    for build in builds:
        with pytest.raises(SpecArgumentError) as err:
            build(*args, **kw)
        assert err.value.argument == argument, str(err.value)
        assert condition in str(err.value), str(err.value)
        messages.add(str(err.value))
    assert len(messages) == 1, messages
    assert launches == []
    for name, t in untouched.items():
        assert torch.equal(_bytes(t), before[name]), f"{name} written by a refused call"


KV_BUILDS = (ref.draft_decode_kv_indices, kernels.draft_decode_kv_indices)
TREE_BUILDS = (ref.build_tree, kernels.build_tree)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("view", ["column slice", "every other column", "transposed", "one row repeated"])
def test_a_strided_req_to_token_is_refused(launches, view, dtype):
    """A view whose row stride is not its row width (or column stride not 1) would be launched
    with the strides the proofs assumed away (the column slice: stride 24, width 16)."""
    r2t = _strided_views(dtype)[view]
    assert not r2t.is_contiguous()
    kv, ptr = _kv_buffers(r2t)
    if dtype == torch.int32:
        kv = kv.to(torch.int32)
    _refused_alike(KV_BUILDS, (torch.tensor(POOL), r2t, torch.tensor(SEQ)),
                   dict(topk=K, num_steps=STEPS, kv_indices=kv, kv_indptr=ptr), "req_to_token", "contiguous",
                   {"kv_indices": kv, "kv_indptr": ptr, "req_to_token": r2t}, launches)


@pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: this launch runs on CPU tensors")
def test_a_one_row_slice_launches_with_row_major_strides(monkeypatch):
    """A one-row slice of a wider table is contiguous to torch but keeps the table's row stride
    (24 here); the wrapper launches it with the row-major (16, 1) the proofs assume, which
    addresses the same cells (row 0 only), and the result is the reference's."""
    made = _recorder(monkeypatch, run=True)
    table = samples.req_to_token(3, 24)
    r2t = table[1:2, :16]
    assert r2t.is_contiguous() and r2t.stride() == (24, 1)
    args = (torch.tensor([0]), r2t, torch.tensor([5]))
    got = kernels.draft_decode_kv_indices(*args, topk=K, num_steps=STEPS)
    want = ref.draft_decode_kv_indices(*args, topk=K, num_steps=STEPS)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    (launch,) = made
    assert (launch.plan.args["r2t_stride0"], launch.plan.args["r2t_stride1"]) == (16, 1)
    assert broken(launch) == []


# --- contracts the caller's sizes control (already refused by validation) ----------------------------

def _kv_args():
    r2t = samples.req_to_token(4, 16)
    kv, ptr = _kv_buffers(r2t)
    return [torch.tensor(POOL), r2t, torch.tensor(SEQ)], {"kv_indices": kv, "kv_indptr": ptr}


def _tree_args(mode=TreeMaskMode.QLEN_ONLY, n=5):
    pl, sel, seq = samples.random_tree_batch(random.Random(4), 2, 2, 3, n, max_seq_len=6)
    outs = ref.build_tree(pl, sel, seq, topk=2, depth=3, num_draft_tokens=n, mode=mode)
    names = ("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
    return [pl, sel, seq], {name: torch.full_like(t, 7) for name, t in zip(names, outs)}, \
        dict(topk=2, depth=3, num_draft_tokens=n, mode=mode)


def test_kv_sizing_contracts_are_refused(launches):
    """indptr_row_width (rows of num_seqs*K + 1 entries) and the non-empty pool of
    req_to_token_contiguous: a call one short is refused."""
    args, outs = _kv_args()
    outs["kv_indptr"] = outs["kv_indptr"][:, :-1].contiguous()
    _refused_alike(KV_BUILDS, args, dict(topk=K, num_steps=STEPS, **outs), "kv_indptr", "entries", outs, launches)
    args, outs = _kv_args()
    args[1] = torch.zeros(0, 16, dtype=torch.int64)
    _refused_alike(KV_BUILDS, args, dict(topk=K, num_steps=STEPS, **outs), "req_pool_indices", "0 rows", outs,
                   launches)


@pytest.mark.parametrize("contract, change, argument", [
    ("mask_item_bits", "uint16 mask for n = 5", "tree_mask"),
    ("mask_item_bits", "uint8 mask for n = 9", "tree_mask"),
    ("pl_width_is_spec", "parent_list one column short", "parent_list"),
    ("sel_width_is_spec", "selected_index one column wide", "selected_index"),
])
def test_tree_sizing_contracts_are_refused(launches, contract, change, argument):
    bitpack = TreeMaskMode.QLEN_ONLY_BITPACKING
    args, outs, kw = _tree_args(bitpack, 9 if "n = 9" in change else 5)
    if argument == "tree_mask":
        outs["tree_mask"] = torch.zeros(outs["tree_mask"].numel(), dtype=getattr(torch, change.split()[0]))
    elif argument == "parent_list":
        args[0] = args[0][:, :-1]
    else:
        args[1] = torch.cat([args[1], args[1][:, :1]], 1)
    _refused_alike(TREE_BUILDS, args, dict(kw, **outs), argument, "must have", outs, launches)


def test_a_strided_tree_table_is_launched_contiguous(launches):
    """pl_width_is_spec / sel_width_is_spec: the kernel addresses rows at the spec's width, so a
    strided parent_list or selected_index is copied (a small per-batch table) into a contiguous one."""
    pl, sel, seq = samples.random_tree_batch(random.Random(5), 3, 2, 3, 6, max_seq_len=6)
    wide = torch.zeros(pl.shape[0], 2 * pl.shape[1], dtype=torch.int64)
    wide[:, ::2] = pl
    kernels.build_tree(wide[:, ::2], sel.t().contiguous().t(), seq, topk=2, depth=3, num_draft_tokens=6,
                       mode=TreeMaskMode.QLEN_ONLY)
    (launch,) = launches
    launch.depth = 3
    assert broken(launch) == []


# --- outputs alone in their storage ------------------------------------------------------------

@pytest.mark.parametrize("output, inp", [("kv_indices", "req_to_token"), ("kv_indptr", "seq_lens")])
def test_a_kv_output_sharing_an_input_is_refused(launches, output, inp):
    """The tensor models give every tensor its own memory: a kernel writing what another program
    reads is outside every proof.  Refused naming the output."""
    args, outs = _kv_args()
    names = ("req_pool_indices", "req_to_token", "seq_lens")
    i = names.index(inp)
    base = torch.zeros(args[i].numel() + outs[output].numel(), dtype=torch.int64)
    args[i] = base[:args[i].numel()].view(args[i].shape).copy_(args[i])
    outs[output] = base[args[i].numel():].view(outs[output].shape).fill_(-7)
    _refused_alike(KV_BUILDS, args, dict(topk=K, num_steps=STEPS, **outs), output, f"the input {inp}",
                   {**outs, inp: args[i]}, launches)


@pytest.mark.parametrize("output, inp", [("positions", "seq_lens"), ("retrive_index", "parent_list")])
def test_a_tree_output_sharing_an_input_is_refused(launches, output, inp):
    args, outs, kw = _tree_args(TreeMaskMode.FULL_MASK)
    i = ("parent_list", "selected_index", "seq_lens").index(inp)
    base = torch.zeros(args[i].numel() + outs[output].numel(), dtype=torch.int64)
    args[i] = base[:args[i].numel()].view(args[i].shape).copy_(args[i])
    outs[output] = base[args[i].numel():].view(outs[output].shape).fill_(7)
    _refused_alike(TREE_BUILDS, args, dict(kw, **outs), output, f"the input {inp}", {**outs, inp: args[i]},
                   launches)


# --- every check can fail -------------------------------------------------------------------------

def _with(launch: Launch, grid=None, depth=None, **changes) -> Launch:
    """``launch`` with a planted change: a grid, plan arguments, constexprs (upper-case names)."""
    args = {k: v for k, v in changes.items() if not k.isupper()}
    consts = {k: v for k, v in changes.items() if k.isupper()}
    plan = LaunchPlan(grid or launch.plan.grid, {**launch.plan.args, **args}, {**launch.plan.constexprs, **consts})
    return Launch(launch.kernel, plan, launch.depth if depth is None else depth)


def _plants(first: dict[str, Launch]) -> list:
    kv, tree, fill = first[KV], first[TREE], first[FILL]
    ka, ta = kv.plan.args, tree.plan.args
    r2t = ka["req_to_token_ptr"]
    seq, empty = ka["seq_lens_ptr"], torch.zeros(0, dtype=torch.int64)
    return [
        ("kv grid halved", _with(kv, grid=(_cdiv(ka["num_seqs"], 2 * kv.plan.constexprs["BLOCK_B"]),)),
         ["grid_is_cdiv", "proof:grid_is_cdiv"]),
        ("kv empty batch launched", _with(kv, grid=(0,), num_seqs=0, req_pool_indices_ptr=empty, seq_lens_ptr=empty,
                                          prefix_ptr=empty), ["batch_nonempty", "proof:batch_nonempty"]),
        ("kv_indptr row without entry 0", _with(kv, indptr_stride=ka["num_seqs"] * ka["topk"],
                                                kv_indptr_ptr=ka["kv_indptr_ptr"][:, 1:].contiguous()),
         ["indptr_row_width", "proof:indptr_row_width"]),
        ("req_to_token row stride 8 past the width", _with(kv, r2t_stride0=r2t.shape[1] + 8),
         ["proof:req_to_token_contiguous", "req_to_token_contiguous"]),
        ("req_to_token column stride 2", _with(kv, r2t_stride1=2), ["proof:req_to_token_contiguous",
                                                                    "req_to_token_contiguous"]),
        ("tree grid halved", _with(tree, grid=(_cdiv(ta["bs"], 2 * tree.plan.constexprs["BLOCK_B"]),)),
         ["grid_is_cdiv", "proof:grid_is_cdiv"]),
        # interpreted, the fill runs one program (its tile is large): plant one program too many
        ("fill grid one more", _with(fill, grid=(fill.plan.grid[0] + 1,)), ["grid_is_cdiv", "proof:grid_is_cdiv"]),
        ("walk one step longer", _with(tree, DEPTH=tree.depth + 1),
         ["DEPTH_is_walk_max_steps", "proof:DEPTH_is_walk_max_steps"]),
        ("parent_list width one more", _with(tree, pl_width=ta["pl_width"] + 1,
                                             parent_list_ptr=torch.zeros(ta["bs"], ta["pl_width"] + 1,
                                                                         dtype=torch.int64)),
         ["pl_width_is_spec", "proof:pl_width_is_spec"]),
        ("selected_index width one less", _with(tree, sel_width=ta["sel_width"] - 1,
                                                selected_index_ptr=ta["selected_index_ptr"][:, 1:].contiguous()),
         ["proof:sel_width_is_spec", "sel_width_is_spec"]),
        ("BITPACKING items of 16 bits for n <= 8",
         _with(tree, tree_mask_ptr=ta["tree_mask_ptr"].to(torch.int16)), ["mask_item_bits"]),
        ("prefix off by one", _with(kv, prefix_ptr=ka["prefix_ptr"] + 1), ["prefix_is_P"]),
        ("PAIRS below num_steps*K", _with(kv, PAIRS=kv.plan.constexprs["PAIRS"] // 2), ["lane_bounds"]),
        ("NODES below n", _with(fill, NODES=fill.plan.constexprs["NODES"] // 2), ["lane_bounds"]),
        ("kv_indices not contiguous", _with(kv, kv_indices_ptr=ka["kv_indices_ptr"].t().contiguous().t()),
         ["tensor_layout"]),
        ("kv_indptr in seq_lens' storage", _with(kv, kv_indptr_ptr=seq), ["outputs_alone", "tensor_layout"]),
    ]


def test_each_check_sees_its_planted_violation(launches):
    """Each planted violation, on an ordinary launch, is named by exactly the checks of its contract."""
    made = _calls(launches)
    bitpack = int(TreeMaskMode.QLEN_ONLY_BITPACKING)
    first = {  # several programs (so a halved grid differs); BITPACKING with 8-bit items
        KV: next(la for la in made if la.kernel == KV and la.plan.grid[0] > 1),
        TREE: next(la for la in made if la.kernel == TREE and la.plan.grid[0] > 1
                   and la.plan.constexprs["MODE"] == bitpack and la.plan.args["n"] <= 8),
        FILL: next(la for la in made if la.kernel == FILL and la.plan.args["n"] > 2)}
    for what, launch, names in _plants(first):
        assert broken(launch) == names, what


def test_a_grid_halved_in_the_plan_is_seen(launches, monkeypatch):
    """The verifier reads the same plan, so its axiom follows a change made there; the formula on
    ints does not."""
    real = launch_plans.kv_plan

    def halved(*args, block_b, **kw):
        plan = real(*args, block_b=block_b, **kw)
        return LaunchPlan((_cdiv(kw["num_seqs"], 2 * block_b),), plan.args, plan.constexprs)
    monkeypatch.setattr(launch_plans, "kv_plan", halved)
    batch = samples.random_kv_batch(random.Random(2), 6, 2, 3, max_seq_len=10)
    kernels.draft_decode_kv_indices(*batch, topk=2, num_steps=3, tile_budget=64)
    (launch,) = launches
    assert not int_contracts(launch)["grid_is_cdiv"]
