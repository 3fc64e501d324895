"""Pointer provenance for the checked interpreter: which tensor argument each pointer
lane of an interpreted launch was derived from.

An overrun is an access that leaves the tensor its pointer came from; on a GPU it
usually lands in a neighbouring allocation, so "inside *some* argument" is not enough.
Triton's interpreter represents a pointer as a ``TensorHandle`` whose ``data`` is a
NumPy array of raw host addresses; nothing in it says which tensor an address belongs
to.  We attach that as an attribute of the handle:

* a :class:`~specbound.kernels.checked.TensorArg`: every lane derives from that argument
  (the common case, and the fast one: one range compare per access);
* :class:`Lanes`: lanes derive from different arguments (``tl.where`` between two
  arguments' pointers, a ``tl.cat``/``tl.join`` of them); an int array of argument
  indices per lane, ``-1`` where provenance is lost;
* :class:`Lost`: provenance is genuinely gone (an integer cast back to a pointer, a
  pointer the interpreter read from memory); the reason goes into the reports.

No attribute at all means the handle came out of an operation we do not follow (for
example ``tensor.T``, which builds its handle outside the builder); the checker treats
that like :class:`Lost` with :data:`UNFOLLOWED` as the reason.

Tags are set where the interpreter materialises argument pointers (``_implicit_cvt``)
and carried through every builder operation that can produce a pointer: ``addptr``,
``splat``/``unsplat``, ``broadcast``, ``expand_dims``, ``reshape``, ``trans``,
``gather``, ``split``, ``cat``, ``join``, ``select`` (``tl.where``), pointer-to-pointer
``bitcast``, and block-pointer / tensor-descriptor ``materialize_pointers``.  For lane
arrays, the interpreter's own operation is applied to the owner array, so shapes move
exactly as the addresses do.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

ATTR = "_specbound_provenance"
UNFOLLOWED = "pointer made by an operation the checker does not follow"
INT_TO_PTR = "integer cast to a pointer (int_to_ptr)"
UNKNOWN_ARG = "tensor argument not identified at launch"


class Lost:
    """Provenance gone for every lane; ``reason`` says how."""
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"Lost({self.reason!r})"


class Lanes:
    """Per-lane owners: ``owners[i]`` is the ``TensorArg.index`` of lane i's argument in
    the running launch, ``-1`` where provenance is lost (for ``reason``)."""
    __slots__ = ("owners", "reason")

    def __init__(self, owners: np.ndarray, reason: str | None):
        self.owners = owners
        self.reason = reason


def get(handle) -> Any:
    return getattr(handle, ATTR, None)


def put(handle, prov) -> None:
    if prov is not None and handle is not None:
        try:
            setattr(handle, ATTR, prov)
        except AttributeError:  # a handle class with __slots__: provenance stays unknown
            pass


def reason_of(prov) -> str:
    if isinstance(prov, (Lost, Lanes)) and prov.reason:
        return prov.reason
    return UNFOLLOWED


def owner_array(prov, shape) -> np.ndarray:
    """Argument index per lane (``-1``: lost), shaped like ``shape``."""
    if isinstance(prov, Lanes):
        return np.broadcast_to(prov.owners, shape)
    index = getattr(prov, "index", -1) if prov is not None and not isinstance(prov, Lost) else -1
    return np.full(shape, index, dtype=np.int16)


def simplify(owners: np.ndarray, args: tuple, reason: str | None):
    """The most compact tag for an owner array: one argument (of the launch's ``args``)
    when all lanes agree."""
    flat = owners.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        first = int(flat[0])
        return args[first] if first >= 0 else Lost(reason or UNFOLLOWED)
    return Lanes(np.ascontiguousarray(owners), reason)


def _joint_reason(*provs) -> str | None:
    """Why the lanes without an owner lost it, over the operands of a merge."""
    reasons = []
    for p in provs:
        r = p.reason if isinstance(p, (Lost, Lanes)) else (UNFOLLOWED if p is None else None)
        if r and r not in reasons:
            reasons.append(r)
    return "; ".join(reasons) or None


def _is_pointer(handle) -> bool:
    import triton.language as tl
    return isinstance(getattr(handle, "dtype", None), tl.pointer_type)


# --- following the builder's operations ---------------------------------------------------

class Follower:
    """Wraps the interpreter builder's pointer-producing operations so results carry the
    provenance of their inputs.  ``install(set_attr)`` shadows the methods through the
    caller's undo-recording ``set_attr``; ``launch_args()`` returns the tensor arguments
    of the running launch (indexed by ``TensorArg.index``)."""

    # operations whose pointer operand is the first argument and whose lanes move by shape
    SHAPE_OPS = ("create_broadcast", "create_expand_dims", "create_reshape", "create_trans",
                 "create_unsplat", "create_gather", "create_split")
    MERGE_OPS = {"create_select": (1, 2), "create_cat": (0, 1), "create_join": (0, 1)}

    def __init__(self, handle_cls, launch_args: Callable[[], tuple]):
        self.handle_cls = handle_cls
        self.launch_args = launch_args

    def _owner_handle(self, prov, data):
        import triton.language as tl
        return self.handle_cls(np.array(owner_array(prov, np.shape(data)), dtype=np.int16), tl.int16)

    def _retag(self, res, prov, args, owners_of: Callable):
        """Tag ``res`` (a handle or a tuple of handles) from the input tag ``prov``;
        ``owners_of(owner_handle)`` applies the same operation to an owner array."""
        if not isinstance(prov, Lanes):
            for h in (res if isinstance(res, tuple) else (res,)):
                put(h, prov)
            return
        import triton.language as tl
        moved = owners_of(self.handle_cls(prov.owners, tl.int16))
        pairs = zip(res, moved) if isinstance(res, tuple) else ((res, moved),)
        for h, o in pairs:
            put(h, simplify(np.asarray(o.data), args, prov.reason))

    def wrap_shape_op(self, orig):
        def op(*a, **k):
            res = orig(*a, **k)
            prov = get(a[0]) if a else None
            if prov is not None:
                self._retag(res, prov, self.launch_args(), lambda oh: orig(oh, *a[1:], **k))
            return res
        return op

    def wrap_addptr(self, orig):
        def addptr(ptr, offset, *a, **k):
            res = orig(ptr, offset, *a, **k)
            prov = get(ptr)
            if isinstance(prov, Lanes):
                put(res, Lanes(np.broadcast_to(prov.owners, np.shape(res.data)), prov.reason))
            else:
                put(res, prov)
            return res
        return addptr

    def wrap_splat(self, orig):
        def splat(ret_ty, arg, *a, **k):
            res = orig(ret_ty, arg, *a, **k)
            prov = get(arg)
            if prov is not None:
                self._retag(res, prov, self.launch_args(), lambda oh: orig(ret_ty, oh, *a, **k))
            return res
        return splat

    def wrap_merge(self, orig, positions: tuple[int, int]):
        i, j = positions

        def merge(*a, **k):
            res = orig(*a, **k)
            if len(a) <= j:
                return res
            pl, pr = get(a[i]), get(a[j])
            if pl is None and pr is None:
                return res                       # not pointers, or both unfollowed
            if pl is pr:
                put(res, pl)
                return res
            operands = list(a)
            operands[i] = self._owner_handle(pl, a[i].data)
            operands[j] = self._owner_handle(pr, a[j].data)
            owners = np.asarray(orig(*operands, **k).data)
            put(res, simplify(owners, self.launch_args(), _joint_reason(pl, pr)))
            return res
        return merge

    def wrap_bitcast(self, orig):
        def bitcast(src, *a, **k):
            res = orig(src, *a, **k)
            prov = get(src)
            if prov is not None and _is_pointer(res):   # pointer to pointer: same lanes
                put(res, prov)
            return res
        return bitcast

    def wrap_int_to_ptr(self, orig):
        def int_to_ptr(*a, **k):
            res = orig(*a, **k)
            put(res, Lost(INT_TO_PTR))
            return res
        return int_to_ptr

    def install(self, builder, set_attr: Callable[[Any, str, Any], None]) -> None:
        for name in self.SHAPE_OPS:
            if hasattr(builder, name):
                set_attr(builder, name, self.wrap_shape_op(getattr(builder, name)))
        for name, pos in self.MERGE_OPS.items():
            if hasattr(builder, name):
                set_attr(builder, name, self.wrap_merge(getattr(builder, name), pos))
        if hasattr(builder, "create_addptr"):
            set_attr(builder, "create_addptr", self.wrap_addptr(builder.create_addptr))
        if hasattr(builder, "create_splat"):
            set_attr(builder, "create_splat", self.wrap_splat(builder.create_splat))
        if hasattr(builder, "create_bitcast"):
            set_attr(builder, "create_bitcast", self.wrap_bitcast(builder.create_bitcast))
        if hasattr(builder, "create_int_to_ptr"):
            set_attr(builder, "create_int_to_ptr", self.wrap_int_to_ptr(builder.create_int_to_ptr))

    def install_materialize(self, mod, set_attr) -> None:
        """Block pointers and tensor descriptors build their pointer tensors from ``base``
        (an argument pointer): the result inherits its tag."""
        for cls_name in ("BlockPointerHandle", "TensorDescHandle"):
            cls = getattr(mod, cls_name, None)
            orig = getattr(cls, "materialize_pointers", None) if cls is not None else None
            if orig is None:
                continue

            def materialize(handle, *a, _orig=orig, **k):
                res = _orig(handle, *a, **k)
                prov = get(getattr(handle, "base", None))
                if isinstance(prov, Lanes):  # a descriptor base is one scalar pointer
                    prov = simplify(prov.owners, self.launch_args(), prov.reason)
                if isinstance(res, tuple) and res:
                    put(res[0], prov)
                return res
            set_attr(cls, "materialize_pointers", materialize)
