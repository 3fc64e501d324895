"""sglang's sizing helpers, run on Z3 terms (or a concrete grid) and compared with the spec.

Each helper's definition is compiled alone, with stand-ins for the few names it uses
(sglang's own ``TreeMaskMode``, itself extracted and checked; a recording ``torch.zeros``;
a record class for ``VerifyMask``) and checked against the spec as a :class:`.claims.Claim`
(on Z3 terms through :mod:`specbound.audit.helper_paths`, or on a dense grid where the code cannot take them).
"""

from __future__ import annotations

import enum
import time
import types
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import z3

from specbound import spec
from specbound.spec import TreeMaskMode as SpecMode

from specbound.audit.report import DIVERGED, ERROR, MATCHED, NOT_PRESENT, UNGUARDED, UNKNOWN_SIGNATURE, AuditReport, Row
from specbound.audit import helper_paths
from specbound.audit.extract import Found, SourceIndex
from .claims import Claim, harness_failure, run_claim

VERIFY_MASK_FILE = "srt/layers/attention/verify_mask.py"
SPEC_UTILS_FILE = "srt/speculative/spec_utils.py"
MODE_FILES = ("kernels/ops/speculative/spec_tree.py", "srt/speculative/eagle_utils.py")

GPU_DEFAULT_MODE = SpecMode.FULL_MASK  # sglang's default_tree_mask_mode() off CPU


@dataclass
class Ctx:
    index: SourceIndex
    report: AuditReport
    modes: Any = None  # sglang's TreeMaskMode (extracted) or the spec's when missing


def _ints(*names):
    return [z3.Int(n) for n in names]


# --- TreeMaskMode ------------------------------------------------------------------------

def check_modes(ctx: Ctx) -> None:
    t0 = time.perf_counter()
    found = ctx.index.find_all_classes("TreeMaskMode")
    if not found:
        ctx.modes = SpecMode
        ctx.report.add(Row("enum.TreeMaskMode", "TreeMaskMode", "member values equal the spec's",
                           "-", NOT_PRESENT, "no class TreeMaskMode in this sglang; the spec's "
                           "values stand in for it below"))
        return
    bad = []
    first = None
    for f in found:
        try:
            cls = ctx.index.load_helper(f, {"IntEnum": enum.IntEnum, "Enum": enum.Enum, "enum": enum})
            members = {m.name: int(m.value) for m in cls}
        except Exception as e:  # noqa: BLE001
            bad.append(f"{f.where}: cannot evaluate ({type(e).__name__}: {e})")
            continue
        want = {m.name: int(m.value) for m in SpecMode}
        if members != want:
            bad.append(f"{f.where}: {members} (spec {want})")
        elif first is None:
            first = cls
    where = ", ".join(f.where for f in found)
    ctx.modes = first if first is not None else SpecMode
    ctx.report.add(Row("enum.TreeMaskMode", f"TreeMaskMode ({where})", "member names and values equal "
                       "the spec's (FULL_MASK=0, QLEN_ONLY=1, QLEN_ONLY_BITPACKING=2)", "ast",
                       DIVERGED if bad else MATCHED, "; ".join(bad) or f"{len(found)} definition(s)",
                       seconds=time.perf_counter() - t0))


def _mode(ctx: Ctx, m: SpecMode):
    return ctx.modes[m.name] if m.name in ctx.modes.__members__ else int(m)


# --- helpers -------------------------------------------------------------------------------

def _load(ctx: Ctx, name: str, files, row_id: str, what: str, want_params: int | Sequence[str]):
    """(found, fn, hook) or None after adding a not-present / unknown-signature row."""
    found = ctx.index.find(name, files)
    if found is None:
        ctx.report.add(Row(row_id, name, what, "-", NOT_PRESENT,
                           f"no `{name}` in this sglang (looked in {', '.join(files)} and every .py file)"))
        return None
    params = found.params()
    if name.endswith(".fits"):
        params = params[1:]
    ok = (len(params) == want_params and len(found.required_params()) <= want_params + 1) \
        if isinstance(want_params, int) else set(found.required_params()) <= set(want_params) <= set(params)
    if not ok:
        ctx.report.add(Row(row_id, f"{name} ({found.where})", what, "-", UNKNOWN_SIGNATURE,
                           f"parameters {found.params()}; the audit knows {want_params}"))
        return None
    hook = helper_paths.make_bool_hook()
    return found, hook


def _compile(ctx: Ctx, found: Found, hook, extra: dict | None = None):
    ns = {"__sb_bool__": hook, "TreeMaskMode": ctx.modes}
    ns.update(extra or {})
    return ctx.index.load_helper(found, ns, transform=helper_paths.instrument)


def _row(ctx, row_id, found: Found, what, hook, claim, t0, *, not_present_on_raise=None):
    try:
        status, method, detail, cex = run_claim(hook, claim, row_id)
    except Exception as e:  # noqa: BLE001 - never a traceback
        status, method, detail, cex = ERROR, "-", f"{type(e).__name__}: {e}", None
    if not_present_on_raise and status == MATCHED and "raises" in detail and "return path" in detail \
            and detail.startswith("0 return"):
        status, detail = NOT_PRESENT, f"{not_present_on_raise} ({detail.split('; ', 1)[1]})"
    return ctx.report.add(Row(row_id, f"{found.name} ({found.where})", what, method, status, detail, cex,
                              seconds=time.perf_counter() - t0))


def check_tree_mask_numel(ctx: Ctx) -> Callable | None:
    what = "tree_mask_numel(mode, bs, n, C) == spec.tree_mask_numel for all bs >= 0, n >= 1, C >= 1"
    got = _load(ctx, "tree_mask_numel", (VERIFY_MASK_FILE,), "helper.tree_mask_numel", what, 4)
    if got is None:
        return None
    found, hook = got
    fn = _compile(ctx, found, hook)
    for m in SpecMode:
        t0 = time.perf_counter()
        mode = _mode(ctx, m)
        bitpack = m is SpecMode.QLEN_ONLY_BITPACKING

        def pre(bs, n, c, _b=bitpack):
            return [bs >= 0, n >= 1, c >= 1] + ([n <= spec.BITPACK_MAX_DRAFT_TOKENS] if _b else [])

        claim = Claim(_ints("bs", "n", "C"), pre, lambda bs, n, c, _m=mode: fn(_m, bs, n, c),
                      lambda bs, n, c, _m=m: spec.tree_mask_numel(_m, bs, n, c),
                      may_raise=(lambda *a: z3.BoolVal(True)) if bitpack else None,
                      grid={"bs": range(0, 7), "n": range(1, 10), "C": range(1, 13)})
        _row(ctx, f"helper.tree_mask_numel[{m.name}]", found, what.replace("mode", m.name, 1), hook, claim, t0,
             not_present_on_raise="sglang's helper does not size BITPACKING; the caller allocates per batch"
             if bitpack else None)
    return fn


def _fake_self(mode, max_bs):
    return types.SimpleNamespace(buffer=None, mode=mode, max_bs=max_bs, is_read=True)


def check_fits(ctx: Ctx, numel_fn: Callable | None) -> None:
    what = "VerifyMask.fits(bs) == spec.fits(bs, max_bs) (bs <= max_bs) for every mode"
    got = _load(ctx, "VerifyMask.fits", (VERIFY_MASK_FILE,), "helper.VerifyMask.fits", what, 1)
    if got is None:
        return
    found, hook = got
    fits = _compile(ctx, found, hook)
    for m in SpecMode:
        t0 = time.perf_counter()
        mode = _mode(ctx, m)
        claim = Claim(_ints("bs", "max_bs"), lambda bs, mx: [bs >= 0, mx >= 0],
                      lambda bs, mx, _m=mode: fits(_fake_self(_m, mx), bs),
                      lambda bs, mx: spec.fits(bs, mx), grid={"bs": range(0, 40), "max_bs": range(0, 40)})
        _row(ctx, f"helper.VerifyMask.fits[{m.name}]", found, what, hook, claim, t0)
    if numel_fn is None:
        return
    # The property fits() exists for (seed 000): a batch that fits writes inside the buffer.
    fits2 = _compile(ctx, found, hook)
    numel_found = ctx.index.find("tree_mask_numel", (VERIFY_MASK_FILE,))
    numel2 = _compile(ctx, numel_found, hook)
    for m in (SpecMode.FULL_MASK, SpecMode.QLEN_ONLY):
        t0 = time.perf_counter()
        mode = _mode(ctx, m)
        vs = _ints("bs", "max_bs", "n", "C", "S")

        def pre(bs, mx, n, c, s):
            return [bs >= 0, mx >= 0, n >= 1, c >= 1, s >= 0, s <= bs * c]

        def call(bs, mx, n, c, s, _m=mode):
            return fits2(_fake_self(_m, mx), bs), numel2(_m, mx, n, c)

        row_id = f"safety.verify_mask_reuse[{m.name}]"
        what2 = ("fits(bs) => the batch's extent (spec.mask_batch_numel, S <= bs*C) <= sglang's "
                 "tree_mask_numel(mode, max_bs, n, C)")
        try:
            pre_v = pre(*vs)
            expl = helper_paths.explore(hook, lambda: call(*vs), pre_v)
            status, detail, cex = MATCHED, "", None
            if expl.unsupported:
                status, detail = ERROR, f"not symbolic: {expl.unsupported}"
            for i, path in enumerate(expl.paths if not expl.unsupported else []):
                if not path.returned:
                    continue  # a refusal is safe
                f, numel = path.value
                used = spec.mask_batch_numel(m, vs[0], vs[2], vs[4])
                v = helper_paths.prove(f"{row_id}/path {i}", used <= numel, pre_v, vs,
                                       [*path.condition, helper_paths.as_bool(f)])
                if v.status == "counterexample":
                    status, detail, cex = DIVERGED, "a batch that fits writes past the buffer", v.model
                    break
                if v.status == "unknown":
                    status, detail = ERROR, f"solver returned unknown (rlimit {helper_paths.RLIMIT})"
                    break
            if status == MATCHED:
                detail = f"proved on {len(expl.paths)} path(s) for all bs, max_bs, n, C, S"
        except Exception as e:  # noqa: BLE001
            status, detail, cex = ERROR, f"{type(e).__name__}: {e}", None
        ctx.report.add(Row(row_id, f"VerifyMask.fits + tree_mask_numel ({found.where})", what2, "z3",
                           status, detail, cex, seconds=time.perf_counter() - t0))


class _Alloc:
    def __init__(self, numel, dtype=None, device=None):
        self.numel, self.dtype, self.device = numel, dtype, device


class _Record:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def check_maybe_create(ctx: Ctx, numel_fn) -> None:
    what = ("maybe_create_verify_mask: None for the draft runner / skip_prefill / no draft tokens, "
            "else a record {mode: FULL_MASK if is_read else QLEN_ONLY, max_bs, buffer of "
            "spec.tree_mask_numel(mode, max_bs, n, C) cells}")
    names = ("is_draft_runner", "skip_prefill", "max_bs", "max_context_len", "num_draft_tokens", "device",
             "is_read")
    got = _load(ctx, "maybe_create_verify_mask", (VERIFY_MASK_FILE,), "helper.maybe_create_verify_mask",
                what, names)
    if got is None:
        return
    found, hook = got
    t0 = time.perf_counter()
    numel_found = ctx.index.find("tree_mask_numel", (VERIFY_MASK_FILE,))
    if numel_found is None:
        ctx.report.add(Row("helper.maybe_create_verify_mask", f"{found.name} ({found.where})", what, "-",
                           NOT_PRESENT, "it calls tree_mask_numel, which this sglang lacks"))
        return
    numel = _compile(ctx, numel_found, hook)
    fake_torch = types.SimpleNamespace(zeros=lambda numel, dtype=None, device=None: _Alloc(numel, dtype, device),
                                       bool="bool", device=object)
    fn = _compile(ctx, found, hook, {"torch": fake_torch, "VerifyMask": _Record, "tree_mask_numel": numel,
                                     "default_tree_mask_mode": lambda: ctx.modes(int(GPU_DEFAULT_MODE)),
                                     "Optional": Any, "msgspec": None})

    def normalise(res):
        if res is None:
            return (False, -1, 0, 0)
        return (True, int(res.mode), res.buffer.numel, res.max_bs)

    worst = (MATCHED, "z3", "", None)
    for draft_runner in (False, True):
        for skip in (False, True):
            for is_read in (True, False):
                def call(mx, n, c, _d=draft_runner, _s=skip, _r=is_read):
                    return normalise(fn(is_draft_runner=_d, skip_prefill=_s, max_bs=mx, max_context_len=c,
                                        num_draft_tokens=n, device="cpu", is_read=_r))

                def expected(mx, n, c, _d=draft_runner, _s=skip, _r=is_read):
                    if _d or _s:
                        return (False, -1, 0, 0)
                    mode = GPU_DEFAULT_MODE if _r else SpecMode.QLEN_ONLY
                    return (True, int(mode), spec.tree_mask_numel(mode, mx, n, c), mx)

                claim = Claim(_ints("max_bs", "n", "C"), lambda mx, n, c: [mx >= 0, n >= 1, c >= 1], call,
                              expected, grid={"max_bs": range(0, 5), "n": range(1, 6), "C": range(1, 6)})
                flags = f"is_draft_runner={draft_runner}, skip_prefill={skip}, is_read={is_read}"
                status, method, detail, cex = run_claim(hook, claim, f"helper.maybe_create_verify_mask[{flags}]")
                if status != MATCHED:
                    detail = f"{flags}: {detail}"
                    worst = (status, method, detail, cex)
                    break
    if worst[0] == MATCHED:
        try:
            res = fn(is_draft_runner=False, skip_prefill=False, max_bs=4, max_context_len=8,
                     num_draft_tokens=None, device="cpu", is_read=True)
            if res is not None:
                worst = (DIVERGED, "probe", "returns a mask for num_draft_tokens=None", None)
            else:
                worst = (MATCHED, "z3", "8 flag combinations proved for all max_bs, n, C; "
                         "None for num_draft_tokens=None", None)
        except Exception as e:  # noqa: BLE001
            worst = ((ERROR, "probe", f"the audit's stand-ins failed, not sglang: {type(e).__name__}: {e}", None)
                     if harness_failure(e) else
                     (DIVERGED, "probe", f"num_draft_tokens=None raises {type(e).__name__}: {e}", None))
    ctx.report.add(Row("helper.maybe_create_verify_mask", f"{found.name} ({found.where})", what, worst[1],
                       worst[0], worst[2], worst[3], seconds=time.perf_counter() - t0))


def check_draft_width(ctx: Ctx) -> Callable | None:
    what = "draft_kv_indices_buffer_width(num_seqs, K, C) == spec (num_seqs*K*C) wherever it is < 2^31"
    got = _load(ctx, "draft_kv_indices_buffer_width", (SPEC_UTILS_FILE,), "helper.draft_kv_indices_buffer_width",
                what, 3)
    if got is None:
        return None
    found, hook = got
    fn = _compile(ctx, found, hook)
    t0 = time.perf_counter()

    def too_big(s, k, c):
        return z3.Not(spec.conjunction(spec.int32_alloc_ok(spec.draft_kv_indices_buffer_width(s, k, c))))

    claim = Claim(_ints("num_seqs", "K", "C"), lambda s, k, c: [s >= 0, k >= 1, c >= 1], fn,
                  spec.draft_kv_indices_buffer_width, may_raise=too_big,
                  grid={"num_seqs": range(0, 9), "K": range(1, 9), "C": range(1, 33)})
    _row(ctx, "helper.draft_kv_indices_buffer_width", found, what, hook, claim, t0)
    # The int32 guard: every width >= 2^31 must be refused.
    t0 = time.perf_counter()
    vs = _ints("num_seqs", "K", "C")
    pre = [vs[0] >= 0, vs[1] >= 1, vs[2] >= 1]
    status, detail, cex = MATCHED, "", None
    try:
        expl = helper_paths.explore(hook, lambda: fn(*vs), pre)
        if expl.unsupported:
            status, detail = ERROR, f"not symbolic: {expl.unsupported}"
        for i, path in enumerate(expl.paths if not expl.unsupported else []):
            if path.returned:
                v = helper_paths.prove(f"helper.draft_kv_indices_buffer_width.int32_guard/path {i}",
                                       z3.Not(too_big(*vs)), pre, vs, path.condition)
                if v.status == "counterexample":
                    status, cex = DIVERGED, v.model
                    detail = "returns a row width >= 2^31 (int32 offsets of the kernel overflow) without complaint"
                    break
                if v.status == "unknown":
                    status, detail = ERROR, "solver returned unknown"
                    break
        if status == MATCHED:
            detail = "every width >= 2^31 is refused (spec.int32_alloc_ok)"
    except Exception as e:  # noqa: BLE001
        status, detail = ERROR, f"{type(e).__name__}: {e}"
    ctx.report.add(Row("helper.draft_kv_indices_buffer_width.int32_guard", f"{found.name} ({found.where})",
                       "refuses every width >= 2^31", "z3", status, detail, cex,
                       seconds=time.perf_counter() - t0))
    return fn


def check_draft_used_len(ctx: Ctx) -> Callable | None:
    what = "draft_kv_indices_used_len(S, K, bs_d, steps) == spec (S*K + bs_d*steps) for all S, bs_d, steps >= 0, K >= 1"
    got = _load(ctx, "draft_kv_indices_used_len", (SPEC_UTILS_FILE,), "helper.draft_kv_indices_used_len", what, 4)
    if got is None:
        return None
    found, hook = got
    fn = _compile(ctx, found, hook)
    t0 = time.perf_counter()
    claim = Claim(_ints("S", "K", "bs_d", "steps"), lambda s, k, b, st: [s >= 0, k >= 1, b >= 0, st >= 0], fn,
                  spec.draft_kv_indices_used_len,
                  grid={"S": range(0, 20), "K": range(1, 6), "bs_d": range(0, 10), "steps": range(0, 6)})
    _row(ctx, "helper.draft_kv_indices_used_len", found, what, hook, claim, t0)
    return fn


def check_kv_capacity(ctx: Ctx) -> None:
    """KV-CAPACITY from sglang's own helpers: used_len(S, K, num_seqs*K, steps) <= width(num_seqs, K, C)."""
    w = ctx.index.find("draft_kv_indices_buffer_width", (SPEC_UTILS_FILE,))
    u = ctx.index.find("draft_kv_indices_used_len", (SPEC_UTILS_FILE,))
    if w is None or u is None:
        ctx.report.add(Row("safety.kv_capacity", "draft_kv_indices_used_len + draft_kv_indices_buffer_width",
                           "sglang's capacity assert holds for every in-contract batch", "-", NOT_PRESENT,
                           "one of the two helpers is missing"))
        return
    hook = helper_paths.make_bool_hook()
    width = _compile(ctx, w, hook)
    used = _compile(ctx, u, hook)
    vs = _ints("num_seqs", "K", "C", "steps", "S")

    def base(ns, k, c, st, s):
        return [ns >= 0, k >= 1, c >= 1, st >= 1, s >= 0, s <= ns * c]

    subject = f"draft_kv_indices_used_len ({u.where}) <= draft_kv_indices_buffer_width ({w.where})"
    for row_id, with_room in (("safety.kv_capacity.without_draft_room", False),
                              ("safety.kv_capacity.with_draft_room", True)):
        t0 = time.perf_counter()
        pre = base(*vs) + ([vs[4] + vs[0] * vs[3] <= vs[0] * vs[2]] if with_room else [])
        status, detail, cex = MATCHED, "", None
        try:
            expl = helper_paths.explore(hook, lambda: (used(vs[4], vs[1], vs[0] * vs[1], vs[3]), width(vs[0], vs[1], vs[2])),
                                   pre)
            if expl.unsupported:
                status, detail = ERROR, f"not symbolic: {expl.unsupported}"
            for i, path in enumerate(expl.paths if not expl.unsupported else []):
                if not path.returned:
                    continue
                u_val, w_val = path.value
                v = helper_paths.prove(f"{row_id}/path {i}", u_val <= w_val, pre, vs, path.condition)
                if v.status == "counterexample":
                    cex = v.model
                    if with_room:
                        status, detail = DIVERGED, "used_len exceeds the row width although every request has room"
                    else:
                        status = UNGUARDED
                        detail = ("the row fits the draft kernel's writes when every request has room for "
                                  "its draft tokens (seq_len[b] + num_steps <= C), a condition sglang never "
                                  "checks (its scheduler keeps it); with seq_len = C the kernel needs more "
                                  "than the row")
                    break
                if v.status == "unknown":
                    status, detail = ERROR, "solver returned unknown"
                    break
            if status == MATCHED:
                detail = ("proved given S + num_seqs*steps <= num_seqs*C" if with_room else
                          "holds without assuming room for the draft tokens")
        except Exception as e:  # noqa: BLE001
            status, detail = ERROR, f"{type(e).__name__}: {e}"
        what = ("used_len(S, K, num_seqs*K, steps) <= width(num_seqs, K, C) for 0 <= S <= num_seqs*C"
                + (" and S + num_seqs*steps <= num_seqs*C" if with_room else ""))
        ctx.report.add(Row(row_id, subject, what, "z3", status, detail, cex, seconds=time.perf_counter() - t0))


def run_all(index: SourceIndex, report: AuditReport) -> Ctx:
    ctx = Ctx(index, report)
    check_modes(ctx)
    numel = check_tree_mask_numel(ctx)
    check_fits(ctx, numel)
    check_maybe_create(ctx, numel)
    check_draft_width(ctx)
    check_draft_used_len(ctx)
    check_kv_capacity(ctx)
    return ctx
