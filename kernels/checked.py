"""A bounds-checked Triton interpreter.

Triton's interpreter (``TRITON_INTERPRET=1``) executes every load and store with raw
host addresses and never checks them: a store just past a tensor silently corrupts its
neighbour, a far one kills the process.  :func:`checked_interpreter` closes that gap.
While it is active, every memory access of every *interpreted* launch is checked against
the tensors passed to that launch **before** the access happens, and an access outside
all of them raises :class:`OutOfBoundsAccess` naming the kernel, program id, lane,
address, the nearest tensor argument and how far past its end (or before its start) the
access lands ("nearest" is by address distance: for a far-away address it is whichever
argument lies closest in memory, so compare ``address`` there).  Optionally it records, per launch and per tensor argument, the element
indices each store/atomic wrote (the write footprint compared with the spec's).

How: the interpreter funnels all memory traffic through a single builder object
(``triton.runtime.interpreter.interpreter_builder``); we shadow its load/store/atomic
methods on the instance for the duration of the context, and wrap
``GridExecutor.__call__`` to learn which kernel runs with which tensors.  Method
signatures differ between triton 3.6 and 3.9, so the wrappers take ``*args, **kwargs``
and find the pointer and mask by parameter name (with a positional fallback).

While checked, the builder's ``debug`` option is switched on, so ``tl.device_assert``
fires (and Triton's own int32 overflow sanitizer on ``+ - *`` becomes active).

Not checked: accesses by compiled (GPU) launches (use guard bands); builder calls made
outside a launch (a @triton.jit helper called directly from Python); gaps inside a
strided view's span and aliasing between arguments (an access anywhere inside any
argument's span passes); data races between programs (the interpreter runs programs one
at a time, in order); alignment; reads of memory the kernel was not meant to read but
that lies inside some argument; int64 wrap-around of addresses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

__all__ = [
    "OutOfBoundsAccess", "CheckedSession", "LaunchRecord", "TensorArg",
    "checked_interpreter", "interpreter_active",
]


class OutOfBoundsAccess(IndexError):
    """An interpreted load/store/atomic addressed memory outside every tensor argument."""

    def __init__(self, *, kernel: str, op: str, program_id: tuple, lane: tuple, flat_lane: int,
                 address: int, nbytes: int, nearest: str | None, past_end: int | None,
                 before_start: int | None, num_bad_lanes: int):
        self.kernel = kernel
        self.op = op
        self.program_id = program_id
        self.lane = lane
        self.flat_lane = flat_lane
        self.address = address
        self.nbytes = nbytes
        self.nearest = nearest
        # Elements past the nearest tensor's end (0 = the first element after it), or
        # elements before its start; exactly one of the two is set when a tensor exists.
        self.past_end = past_end
        self.before_start = before_start
        self.num_bad_lanes = num_bad_lanes
        if nearest is None:
            where = "no tensor argument"
        elif past_end is not None:
            where = f"{past_end} element(s) past the end of {nearest!r}"
        else:
            where = f"{before_start} element(s) before the start of {nearest!r}"
        super().__init__(
            f"{kernel}: out-of-bounds {op} by program {program_id}, lane {lane} "
            f"(flat {flat_lane}; {num_bad_lanes} bad lane(s)) at address {address:#x} "
            f"({nbytes} byte(s)): {where}")


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument of one launch: the byte range the kernel may touch."""
    name: str
    base: int          # address of element 0 of the view
    nbytes: int        # bytes spanned by the view (0 for an empty tensor)
    itemsize: int

    @property
    def end(self) -> int:
        return self.base + self.nbytes


@dataclass
class LaunchRecord:
    kernel: str
    grid: tuple | None
    tensors: dict[str, TensorArg]
    # tensor argument name -> element indices written (only with record_footprint)
    writes: dict[str, set[int]] = field(default_factory=dict)
    # program id -> the same, per program (only with record_footprint): what a race check
    # compares, since the interpreter runs the programs one after the other
    writes_by_program: dict[tuple, dict[str, set[int]]] = field(default_factory=dict)
    loads: int = 0
    stores: int = 0


@dataclass
class CheckedSession:
    """Handle yielded by :func:`checked_interpreter`."""
    record_footprint: bool
    launches: list[LaunchRecord] = field(default_factory=list)
    accesses_checked: int = 0

    def written(self, kernel: str | None = None) -> dict[str, set[int]]:
        """Union over launches (optionally of one kernel) of the element indices written
        per tensor argument name."""
        out: dict[str, set[int]] = {}
        for rec in self.launches:
            if kernel is not None and rec.kernel != kernel:
                continue
            for name, cells in rec.writes.items():
                out.setdefault(name, set()).update(cells)
        return out

    def conflicting_writes(self) -> str | None:
        """The first cell two programs of one launch both stored (a race on a GPU, where
        programs run concurrently), described; None when there is none.  Needs
        ``record_footprint``."""
        for rec in self.launches:
            owner: dict = {}
            for pid, tensors in sorted(rec.writes_by_program.items()):
                for name, cells in sorted(tensors.items()):
                    for c in sorted(cells):
                        prev = owner.setdefault((name, c), pid)
                        if prev != pid:
                            return f"{rec.kernel}: {name}[{c}] stored by programs {prev} and {pid}"
        return None

    def clear(self) -> None:
        self.launches.clear()
        self.accesses_checked = 0


# --- module state --------------------------------------------------------------------

_lock = threading.RLock()
_sessions: list[CheckedSession] = []
_current: LaunchRecord | None = None
_undo: list[tuple[Any, str, Any]] = []
_MISSING = object()


def interpreter_active() -> bool:
    """Whether Triton kernels defined now would run under the interpreter."""
    import os
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


# --- describing the tensors of a launch ------------------------------------------------

def _tensor_span(t) -> tuple[int, int, int]:
    """(base address, bytes spanned, itemsize) of a torch tensor view."""
    itemsize = t.element_size()
    if t.numel() == 0:
        return t.data_ptr(), 0, itemsize
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0)
    lo = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0)  # negative strides
    return t.data_ptr() + lo * itemsize, (last - lo + 1) * itemsize, itemsize


def _collect_tensors(fn, args, kwargs) -> dict[str, TensorArg]:
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        names = []
    out: dict[str, TensorArg] = {}

    def add(name, value):
        base_t = getattr(value, "base", None) if type(value).__name__ == "TensorWrapper" else None
        t = base_t if base_t is not None else value
        if hasattr(t, "data_ptr") and hasattr(t, "element_size"):
            base, nbytes, itemsize = _tensor_span(t)
            out[name] = TensorArg(name, base, nbytes, itemsize)
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                add(f"{name}[{i}]", v)
        elif hasattr(value, "base") and hasattr(value, "block_shape"):  # TensorDescriptor
            add(f"{name}.base", value.base)

    for i, a in enumerate(args):
        add(names[i] if i < len(names) else f"arg{i}", a)
    for k, v in kwargs.items():
        add(k, v)
    return out


# --- the checks --------------------------------------------------------------------------

def _is_pointer_handle(h) -> bool:
    import triton.language as tl
    return hasattr(h, "data") and isinstance(getattr(h, "dtype", None), tl.pointer_type)


def _elem_bytes(ptr_handle) -> int:
    ty = ptr_handle.dtype
    while hasattr(ty, "element_ty"):
        ty = ty.element_ty
    bits = getattr(ty, "primitive_bitwidth", 8)
    return max(1, bits // 8)


def _bind(orig, args, kwargs) -> dict[str, Any]:
    try:
        return dict(inspect.signature(orig).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {}


def _find_ptr_mask(kind: str, orig, args, kwargs):
    """Locate the pointer handle and the mask handle of a memory op, by name if the
    signature allows it, else by position among the handles."""
    bound = _bind(orig, args, kwargs)
    ptr = next((bound[n] for n in ("ptrs", "ptr", "pointer", "pointers") if n in bound), None)
    mask = next((bound[n] for n in ("mask", "masks") if n in bound), None)
    if ptr is None or not _is_pointer_handle(ptr):
        handles = [a for a in list(args) + list(kwargs.values()) if _is_pointer_handle(a)]
        if not handles:
            return None, None
        ptr = handles[0]
        if mask is None:
            bools = [a for a in list(args) + list(kwargs.values())
                     if a is not ptr and hasattr(a, "data") and isinstance(a.data, np.ndarray)
                     and a.data.dtype == np.bool_]
            # load(ptrs, mask, other): the mask is the first bool handle; store(ptrs, value,
            # mask) and rmw(op, ptr, val, mask): the last.
            if bools:
                mask = bools[0] if kind == "load" else bools[-1]
    return ptr, mask


def _describe(addr: int, nbytes: int, tensors: dict[str, TensorArg]):
    best = None
    for t in tensors.values():
        if addr < t.base:
            dist = t.base - addr
        elif addr + nbytes > t.end:
            dist = addr + nbytes - t.end
        else:
            dist = 0
        if best is None or dist < best[0]:
            best = (dist, t)
    if best is None:
        return None, None, None
    t = best[1]
    if addr >= t.base:
        return t.name, (addr - t.end) // t.itemsize if addr >= t.end else 0, None
    return t.name, None, -((addr - t.base) // t.itemsize)


def _check(kind: str, op: str, ptr, mask, *, write: bool):
    rec = _current
    if rec is None:  # a builder call outside any launch we saw: nothing to check against
        return
    addrs = np.asarray(ptr.data)
    if addrs.dtype != np.uint64:
        addrs = addrs.astype(np.uint64)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
    else:
        m = np.ones(addrs.shape, dtype=bool)
    nb = _elem_bytes(ptr)
    flat_addr = addrs.reshape(-1)
    flat_m = m.reshape(-1)
    ok = np.zeros(flat_addr.shape, dtype=bool)
    owners = []
    for t in rec.tensors.values():
        if t.nbytes == 0:
            continue
        inside = (flat_addr >= np.uint64(t.base)) & (flat_addr <= np.uint64(t.end - nb)) \
            if t.nbytes >= nb else np.zeros(flat_addr.shape, dtype=bool)
        ok |= inside
        owners.append((t, inside))
    bad = flat_m & ~ok
    for s in _sessions:
        s.accesses_checked += int(flat_m.sum())
    if bad.any():
        idx = np.flatnonzero(bad)
        lane_flat = int(idx[0])
        addr = int(flat_addr[lane_flat])
        lane = tuple(int(i) for i in np.unravel_index(lane_flat, addrs.shape)) if addrs.ndim else ()
        name, past, before = _describe(addr, nb, rec.tensors)
        pid = tuple(getattr(_builders(_interp_module())[0], "grid_idx", None) or ())
        raise OutOfBoundsAccess(kernel=rec.kernel, op=op, program_id=pid, lane=lane,
                                flat_lane=lane_flat, address=addr, nbytes=nb, nearest=name,
                                past_end=past, before_start=before, num_bad_lanes=int(idx.size))
    if write:
        rec.stores += 1
        if any(s.record_footprint for s in _sessions):
            pid = tuple(getattr(_builders(_interp_module())[0], "grid_idx", None) or ())
            mine = rec.writes_by_program.setdefault(pid, {})
            for t, inside in owners:
                sel = flat_m & inside
                if sel.any():
                    cells = {int(c) for c in np.unique((flat_addr[sel] - np.uint64(t.base)) // np.uint64(t.itemsize))}
                    rec.writes.setdefault(t.name, set()).update(cells)
                    mine.setdefault(t.name, set()).update(cells)
    else:
        rec.loads += 1


def _wrap_mem(builder, meth: str, kind: str, write: bool):
    orig = getattr(builder, meth, None)
    if orig is None:
        return

    def wrapped(*args, **kwargs):
        ptr, mask = _find_ptr_mask(kind, orig, args, kwargs)
        if ptr is not None:
            _check(kind, f"{kind} ({meth})", ptr, mask, write=write)
        return orig(*args, **kwargs)

    wrapped.__wrapped__ = orig
    _set(builder, meth, wrapped)


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
        rec = LaunchRecord(kernel=name, grid=self.grid if isinstance(self.grid, tuple) else None,
                           tensors=_collect_tensors(fn, args_dev, kwargs))
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

    def init_hst(self, *a, **k):
        # Device tensors are copied to host storages before the run: check against the
        # copies (their addresses are the ones the interpreter dereferences).
        res = orig_init_hst(self, *a, **k)
        rec = getattr(self, "_specbound_record", None)
        if rec is not None and isinstance(res, tuple) and len(res) == 2:
            args_hst, kwargs_hst = res
            rec.tensors = _collect_tensors(self.fn, args_hst, kwargs_hst)
        return res

    _set(ge, "__call__", call)
    if orig_init_hst is not None:
        _set(ge, "_init_args_hst", init_hst)


def _install():
    mod = _interp_module()
    for b in _builders(mod):
        for meth in ("create_masked_load", "create_load"):
            _wrap_mem(b, meth, "load", False)
        for meth in ("create_masked_store", "create_store"):
            _wrap_mem(b, meth, "store", True)
        for meth in ("create_atomic_rmw", "create_atomic_cas"):
            _wrap_mem(b, meth, "store", True)
        opts = getattr(b, "options", None)
        if opts is not None and dataclasses.is_dataclass(opts) and hasattr(opts, "debug"):
            _set(b, "options", dataclasses.replace(opts, debug=True))
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
