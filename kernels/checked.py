"""A bounds-checked Triton interpreter that knows which tensor each pointer belongs to.

Triton's interpreter (``TRITON_INTERPRET=1``) executes every load and store with raw
host addresses and never checks them: a store just past a tensor silently corrupts its
neighbour, a far one kills the process.  :func:`checked_interpreter` closes that gap.
While it is active, every memory access of every *interpreted* launch is checked
**before** it happens against the tensor argument its pointer was derived from (its
*provenance*, :mod:`._provenance`): a load, store or atomic whose lane address leaves
that argument raises :class:`OutOfBoundsAccess`, also when the address lands inside
another argument (an overrun into a neighbouring allocation, the usual case on a GPU).
The report names the kernel, program id, lane, address, the argument and how far past
its end (or before its start) the access lands, the argument it lands in if any, and
the kernel source line (file:line and its text).  Optionally the session records, per
launch and per tensor argument, the element indices each store/atomic wrote, each cell
attributed to the argument its pointer came from (the write footprint compared with
the spec's; :meth:`CheckedSession.conflicting_writes` finds races on it).

Where provenance is genuinely lost (an integer cast back to a pointer, an address the
interpreter holds as a plain integer, a pointer made by an operation we do not follow)
the lane is checked as before, against *every* argument, and this is never silent: the
launch record counts such lanes by reason and source line
(:attr:`LaunchRecord.provenance_lost`, :attr:`CheckedSession.accesses_without_provenance`)
and a report on such a lane says that provenance was lost and why.

How: the interpreter funnels all memory traffic and pointer arithmetic through one
builder object (``triton.runtime.interpreter.interpreter_builder``); we shadow its
methods on the instance for the duration of the context, tag argument pointers where
the interpreter materialises them (``_implicit_cvt``), and wrap
``GridExecutor.__call__`` to learn which kernel runs with which tensors.  Method
signatures differ between triton 3.6 and 3.9, so the wrappers take ``*args, **kwargs``
and find the pointer and mask by parameter name (with a positional fallback).

While checked, the builder's ``debug`` option is switched on, so ``tl.device_assert``
fires (and Triton's own int32 overflow sanitizer on ``+ - *`` becomes active).

Not checked: accesses by compiled (GPU) launches (use guard bands); builder calls made
outside a launch (a @triton.jit helper called directly from Python); gaps inside a
strided view's span (an access anywhere inside its own argument's span passes); memory
the kernel was not meant to touch inside its own argument (that is the footprint's
job); data races other than two programs storing one cell (the interpreter runs
programs one at a time, in order, so a read racing a write goes unseen); alignment;
int64 wrap-around of addresses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import linecache
import os
import sys
import threading
from typing import Any, Iterator

import numpy as np

from . import _addresses as addresses
from . import _provenance as provenance
from ._records import CheckedSession, LaunchRecord, OutOfBoundsAccess, TensorArg

__all__ = [
    "OutOfBoundsAccess", "CheckedSession", "LaunchRecord", "TensorArg",
    "checked_interpreter", "interpreter_active",
]


# --- module state --------------------------------------------------------------------

_lock = threading.RLock()
_sessions: list[CheckedSession] = []
_current: LaunchRecord | None = None
_undo: list[tuple[Any, str, Any]] = []
_MISSING = object()
_builder = None           # the interpreter builder whose grid_idx names the program
_mem_depth = 0            # >0 inside a wrapped memory op (create_load calls create_masked_load)
# Library code between a kernel line and our wrappers (skipped when naming the line).
_skip_dirs: tuple[str, ...] = ()
_skip_files: frozenset[str] = frozenset()


def interpreter_active() -> bool:
    """Whether Triton kernels defined now would run under the interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _interp_module():
    from triton.runtime import interpreter
    return interpreter


def _builders(mod) -> list:
    # The builder instance is a module global; its name changed across releases.
    found = []
    for name in ("interpreter_builder", "builder", "_builder"):
        obj = getattr(mod, name, None)
        if obj is not None and hasattr(obj, "create_masked_load") and obj not in found:
            found.append(obj)
    if not found:
        raise RuntimeError("checked_interpreter: cannot find the Triton interpreter's builder "
                           f"(triton {_triton_version()}); unsupported release")
    return found


def _triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except Exception:  # pragma: no cover
        return "?"


def _set(obj, name, value):
    _undo.append((obj, name, obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING))
    setattr(obj, name, value)


def _restore_all():
    while _undo:
        obj, name, old = _undo.pop()
        if old is _MISSING:
            try:
                delattr(obj, name)
            except AttributeError:
                pass
        else:
            setattr(obj, name, old)


def _program_id() -> tuple:
    return tuple(getattr(_builder, "grid_idx", None) or ())


def _launch_args() -> tuple:
    rec = _current
    return tuple(rec.tensors.values()) if rec is not None else ()


def _kernel_site() -> tuple[str, int, str] | None:
    """(file, line, text) of the innermost frame outside Triton, NumPy and this package's
    checker: the kernel (or @triton.jit helper) line being interpreted."""
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if path not in _skip_files and not path.startswith(_skip_dirs):
            return path, f.f_lineno, linecache.getline(path, f.f_lineno).strip()
        f = f.f_back
    return None


# --- the checks --------------------------------------------------------------------------

def _check(op: str, ptr, mask, *, write: bool):
    rec = _current
    if rec is None:  # a builder call outside any launch we saw: nothing to check against
        return
    addrs = np.asarray(ptr.data)
    if addrs.dtype != np.uint64:
        addrs = addrs.astype(np.uint64)
    flat_addr = addrs.reshape(-1)
    if mask is not None:
        flat_m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape).reshape(-1)
    else:
        flat_m = np.ones(flat_addr.shape, dtype=bool)
    nb = addresses.elem_bytes(ptr)
    prov = provenance.get(ptr) if addresses.is_pointer_handle(ptr) else None
    args = tuple(rec.tensors.values())
    owner, lane_owner = addresses.owners(prov, addrs.shape)
    if owner is not None:                               # the common case: one argument
        ok = addresses.inside(flat_addr, owner, nb)
    else:
        ok = np.zeros(flat_addr.shape, dtype=bool)
        for t in args:
            sel = lane_owner == t.index
            if sel.any():
                ok[sel] = addresses.inside(flat_addr[sel], t, nb)
        lost = lane_owner < 0
        if lost.any():
            ok[lost] = addresses.inside_any(flat_addr[lost], args, nb)
            _note_lost(rec, int((lost & flat_m).sum()), addresses.lost_reason(ptr, prov))
    bad = flat_m & ~ok
    for s in _sessions:
        s.accesses_checked += int(flat_m.sum())
    if bad.any():
        _raise(rec, op, ptr, prov, addrs, flat_addr, bad, nb, owner, lane_owner, args)
    if write:
        rec.stores += 1
        if any(s.record_footprint for s in _sessions):
            _record_writes(rec, flat_addr, flat_m, nb, owner, lane_owner, args)
    else:
        rec.loads += 1


def _note_lost(rec: LaunchRecord, lanes: int, reason: str) -> None:
    if not lanes:
        return
    site = _kernel_site()
    key = reason + (f" at {site[0]}:{site[1]}" if site else "")
    rec.provenance_lost[key] = rec.provenance_lost.get(key, 0) + lanes
    for s in _sessions:
        s.accesses_without_provenance += lanes


def _raise(rec, op, ptr, prov, addrs, flat_addr, bad, nb, owner, lane_owner, args):
    idx = np.flatnonzero(bad)
    lane_flat = int(idx[0])
    addr = int(flat_addr[lane_flat])
    lane = tuple(int(i) for i in np.unravel_index(lane_flat, addrs.shape)) if addrs.ndim else ()
    if owner is None and lane_owner[lane_flat] >= 0:
        owner = args[int(lane_owner[lane_flat])]
    if owner is not None:
        target, reason = owner, None
        landed = next((t for t in args if t is not owner and t.base <= addr and addr + nb <= t.end), None)
    else:
        target, reason, landed = addresses.nearest(addr, nb, args), addresses.lost_reason(ptr, prov), None
    past, before = addresses.relative(addr, target) if target is not None else (None, None)
    site = _kernel_site() or (None, None, None)
    raise OutOfBoundsAccess(
        kernel=rec.kernel, op=op, program_id=_program_id(), lane=lane, flat_lane=lane_flat, address=addr,
        nbytes=nb, nearest=target.name if target is not None else None, past_end=past, before_start=before,
        num_bad_lanes=int(idx.size), argument=owner.name if owner is not None else None,
        landed_in=landed.name if landed is not None else None,
        landed_element=(addr - landed.base) // landed.itemsize if landed is not None else None,
        provenance_lost=reason, source_file=site[0], source_line=site[1], source_text=site[2])


def _record_writes(rec, flat_addr, flat_m, nb, owner, lane_owner, args):
    """Each written cell goes to the argument its pointer came from; lanes without
    provenance go to every argument whose span holds them (the best that is known)."""
    pid = _program_id()

    def add(t: TensorArg, addr: np.ndarray):
        if addr.size:
            rec.footprint.add(pid, t, ((addr - np.uint64(t.base)) // np.uint64(t.itemsize)).astype(np.int64))

    if owner is not None:
        add(owner, flat_addr[flat_m])
        return
    for t in args:
        add(t, flat_addr[flat_m & (lane_owner == t.index)])
    lost = flat_m & (lane_owner < 0)
    if lost.any():
        for t in args:
            add(t, flat_addr[lost][addresses.inside(flat_addr[lost], t, nb)])


def _locate(params: list[str], names: tuple[str, ...]) -> tuple[str | None, int | None]:
    for n in names:
        if n in params:
            return n, params.index(n)
    return None, None


def _wrap_mem(builder, meth: str, kind: str, write: bool):
    orig = getattr(builder, meth, None)
    if orig is None:
        return
    try:
        params = list(inspect.signature(orig).parameters)
    except (TypeError, ValueError):
        params = []
    ptr_name, ptr_pos = _locate(params, ("ptrs", "ptr", "pointer", "pointers"))
    mask_name, mask_pos = _locate(params, ("mask", "masks"))
    op = f"{kind} ({meth})"

    def find(args, kwargs):
        """The pointer and mask handles, by parameter name, else by position among the
        handles (an unknown signature)."""
        ptr = kwargs.get(ptr_name, args[ptr_pos] if ptr_pos is not None and ptr_pos < len(args) else None)
        mask = kwargs.get(mask_name, args[mask_pos] if mask_pos is not None and mask_pos < len(args) else None)
        if ptr is not None and hasattr(ptr, "data"):
            return ptr, mask
        values = list(args) + list(kwargs.values())
        handles = [a for a in values if addresses.is_pointer_handle(a)]
        if not handles:
            return None, None
        ptr = handles[0]
        bools = [a for a in values if a is not ptr and hasattr(a, "data") and isinstance(a.data, np.ndarray)
                 and a.data.dtype == np.bool_]
        # load(ptrs, mask, other): the mask is the first bool handle; store(ptrs, value,
        # mask) and rmw(op, ptr, val, mask): the last.
        return ptr, (bools[0] if kind == "load" else bools[-1]) if bools else None

    def wrapped(*args, **kwargs):
        global _mem_depth
        if _mem_depth:       # an inner call of an op already checked (create_load -> masked)
            return orig(*args, **kwargs)
        ptr, mask = find(args, kwargs)
        if ptr is not None:
            _check(op, ptr, mask, write=write)
        _mem_depth += 1
        try:
            res = orig(*args, **kwargs)
        finally:
            _mem_depth -= 1
        if kind == "load" and addresses.is_pointer_handle(res):
            provenance.put(res, provenance.Lost("pointer loaded from memory"))
        return res

    wrapped.__wrapped__ = orig
    _set(builder, meth, wrapped)


def _wrap_implicit_cvt(mod):
    """Tag the pointer the interpreter makes of each tensor argument with that argument."""
    orig = getattr(mod, "_implicit_cvt", None)
    if orig is None:
        return

    def cvt(arg):
        res = orig(arg)
        rec = _current
        if rec is not None and hasattr(arg, "data_ptr"):
            owner = rec.by_id.get(id(arg)) or provenance.Lost(provenance.UNKNOWN_ARG)
            provenance.put(getattr(res, "handle", None), owner)
        return res

    cvt.__wrapped__ = orig
    _set(mod, "_implicit_cvt", cvt)


def _wrap_launch(mod):
    ge = getattr(mod, "GridExecutor", None)
    if ge is None:
        raise RuntimeError("checked_interpreter: triton.runtime.interpreter.GridExecutor not found")
    orig_call = ge.__call__
    orig_init_hst = getattr(ge, "_init_args_hst", None)

    def call(self, *args_dev, **kwargs):
        global _current
        fn = self.fn
        name = getattr(fn, "__name__", repr(fn))
        tensors, by_id = addresses.collect_tensors(fn, args_dev, kwargs)
        rec = LaunchRecord(kernel=name, grid=self.grid if isinstance(self.grid, tuple) else None,
                           tensors=tensors, by_id=by_id)
        self._specbound_record = rec
        prev, _current = _current, rec
        for s in _sessions:
            s.launches.append(rec)
        try:
            return orig_call(self, *args_dev, **kwargs)
        except Exception as e:  # surface our error (and device asserts) unwrapped
            cause = e
            while cause is not None:
                if isinstance(cause, (OutOfBoundsAccess, AssertionError)):
                    raise cause.with_traceback(cause.__traceback__) from None
                cause = cause.__cause__
            raise
        finally:
            _current = prev
            rec.by_id = {}   # ids of the host copies are meaningless after the launch

    def init_hst(self, *a, **k):
        # Device tensors are copied to host storages before the run: check against the
        # copies (their addresses are the ones the interpreter dereferences).
        res = orig_init_hst(self, *a, **k)
        rec = getattr(self, "_specbound_record", None)
        if rec is not None and isinstance(res, tuple) and len(res) == 2:
            args_hst, kwargs_hst = res
            rec.tensors, rec.by_id = addresses.collect_tensors(self.fn, args_hst, kwargs_hst)
        return res

    _set(ge, "__call__", call)
    if orig_init_hst is not None:
        _set(ge, "_init_args_hst", init_hst)


def _install():
    global _builder, _skip_dirs, _skip_files
    import triton

    mod = _interp_module()
    _skip_dirs = (os.path.dirname(triton.__file__) + os.sep, os.path.dirname(np.__file__) + os.sep)
    _skip_files = frozenset({__file__, provenance.__file__, addresses.__file__})
    follower = provenance.Follower(mod.TensorHandle, _launch_args)
    builders = _builders(mod)
    _builder = builders[0]
    for b in builders:
        for meth in ("create_masked_load", "create_load"):
            _wrap_mem(b, meth, "load", False)
        for meth in ("create_masked_store", "create_store"):
            _wrap_mem(b, meth, "store", True)
        for meth in ("create_atomic_rmw", "create_atomic_cas"):
            _wrap_mem(b, meth, "store", True)
        follower.install(b, _set)
        opts = getattr(b, "options", None)
        if opts is not None and dataclasses.is_dataclass(opts) and hasattr(opts, "debug"):
            _set(b, "options", dataclasses.replace(opts, debug=True))
    follower.install_materialize(mod, _set)
    _wrap_implicit_cvt(mod)
    _wrap_launch(mod)


@contextlib.contextmanager
def checked_interpreter(record_footprint: bool = False) -> Iterator[CheckedSession]:
    """Check every memory access of interpreted Triton launches inside the block.

    Yields a :class:`CheckedSession`; with ``record_footprint=True`` each
    :class:`LaunchRecord` in ``session.launches`` holds the element indices written
    per tensor argument.  Nesting is allowed (the outermost block installs the hooks).
    Compiled (GPU) launches are not affected: use guard bands there.
    """
    session = CheckedSession(record_footprint=record_footprint)
    with _lock:
        if not _sessions:
            try:
                _install()
            except Exception:
                _restore_all()
                raise
        _sessions.append(session)
    try:
        yield session
    finally:
        with _lock:
            _sessions.remove(session)
            if not _sessions:
                _restore_all()
