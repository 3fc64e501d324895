"""The sanitized process: ``python -m specbound.engines.sglang.cuda.child LIBRARY RESPONSE_FD``.

It runs with the ASan runtime preloaded (``LD_PRELOAD``; a library built with
``-fsanitize=address`` can only be loaded into a process whose first library is that
runtime), so every ``malloc`` of this process carries ASan's redzones.  Running it as a
child of the audit keeps the audit alive whatever the kernel does: a sanitizer report
ends this process only, and a hang that escapes the step budget is ended by the parent's
watchdog.

Requests arrive as JSON lines on stdin, responses leave as JSON lines on RESPONSE_FD
(stdout and stderr belong to the kernel's ``printf`` and to the sanitizers).  Before
every launch a marker line ``@@specbound-launch <id> <buffers>`` goes to stderr with each
buffer's address and size, so the parent can tell which launch a report belongs to and
which buffer an address falls in.

Buffers: each one is a single ``malloc`` (ASan's, with its own redzones around it) of
``GUARD`` bytes, exactly the requested extent, ``GUARD`` bytes.  The guards hold
:data:`GUARD_BYTE` and are poisoned for ASan (an access is reported at once, with the
exact boundary: ASan tracks poisoning to the byte); after the launch they are compared
too (a second, independent check, for code ASan did not instrument).  The bytes come from
the parent, where they are numpy images of the spec-sized tensors.  A ``lazy`` buffer is
an anonymous ``MAP_NORESERVE`` mapping: its pages cost memory only where the kernel
writes, so a 2 GiB mask of which the kernel touches a few rows can be handed to it at its
exact extent.

This module imports only the standard library (it runs under ASan, and starts again
after every report, so it starts fast).
"""

from __future__ import annotations

import base64
import ctypes
import json
import mmap
import sys

GUARD = 256
GUARD_BYTE = 0xA5

# Scalar parameter types the launcher accepts, by their spelling in the kernel.
SCALAR_CTYPES = {
    "int": "c_int", "int32_t": "c_int32", "unsigned": "c_uint", "unsigned int": "c_uint", "uint32_t": "c_uint32",
    "int64_t": "c_int64", "long": "c_long", "long long": "c_longlong", "uint64_t": "c_uint64",
    "size_t": "c_size_t", "bool": "c_bool", "float": "c_float", "double": "c_double",
}

_MAP_NORESERVE = 0x4000          # Linux; the mmap module does not export it


class _Buffer:
    def __init__(self, spec: dict, libc, poison):
        self.name = spec["buf"]
        self.nbytes = int(spec["nbytes"])
        total = GUARD + self.nbytes + GUARD
        self._libc = libc
        self._lazy = bool(spec.get("lazy"))
        if self._lazy:
            base = libc.mmap(None, total, mmap.PROT_READ | mmap.PROT_WRITE,
                             mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
            if base in (None, ctypes.c_void_p(-1).value):
                raise MemoryError(f"mmap of {total} bytes for {self.name} failed (errno {ctypes.get_errno()})")
        else:
            base = libc.malloc(total)          # ASan's malloc: its own redzones lie beyond the guards
            if not base:
                raise MemoryError(f"malloc of {total} bytes for {self.name} failed")
        self.base, self.addr, self.total = base, base + GUARD, total
        ctypes.memset(base, GUARD_BYTE, GUARD)
        ctypes.memset(self.addr + self.nbytes, GUARD_BYTE, GUARD)
        data = spec.get("data")
        if data is not None:
            raw = base64.b64decode(data)
            if len(raw) != self.nbytes:
                raise ValueError(f"{self.name}: {len(raw)} data bytes for an extent of {self.nbytes}")
            ctypes.memmove(self.addr, raw, self.nbytes)
        elif not self._lazy:
            ctypes.memset(self.addr, int(spec.get("fill", 0)), self.nbytes)
        self._poison = poison
        poison[0](self.base, GUARD)
        poison[0](self.addr + self.nbytes, GUARD)

    def guards_changed(self) -> str | None:
        """None, or which guard bytes the launch changed."""
        self._poison[1](self.base, GUARD)
        self._poison[1](self.addr + self.nbytes, GUARD)
        before = ctypes.string_at(self.base, GUARD)
        after = ctypes.string_at(self.addr + self.nbytes, GUARD)
        bad_before = [GUARD - i for i, ch in enumerate(before) if ch != GUARD_BYTE]
        bad_after = [i for i, ch in enumerate(after) if ch != GUARD_BYTE]
        parts = []
        if bad_before:
            parts.append(f"{len(bad_before)} guard byte(s) before the start changed (nearest: "
                         f"{min(bad_before)} byte(s) before)")
        if bad_after:
            parts.append(f"{len(bad_after)} guard byte(s) past the end changed (first: {bad_after[0]} "
                         "byte(s) past the end)")
        return "; ".join(parts) or None

    def contents(self) -> bytes:
        return ctypes.string_at(self.addr, self.nbytes)

    def release(self):
        self._poison[1](self.base, GUARD)
        self._poison[1](self.addr + self.nbytes, GUARD)
        if self._lazy:
            self._libc.munmap(self.base, self.total)
        else:
            self._libc.free(self.base)


def _poison_functions():
    rt = ctypes.CDLL(None)
    try:
        poison, unpoison = rt.__asan_poison_memory_region, rt.__asan_unpoison_memory_region
    except AttributeError:
        raise SystemExit("specbound child: the ASan runtime is not loaded (LD_PRELOAD it)") from None
    for f in (poison, unpoison):
        f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        f.restype = None
    return poison, unpoison


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.malloc.restype = libc.mmap.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _launch(lib, libc, req: dict, poison) -> dict:
    buffers: dict[str, _Buffer] = {}
    argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p]
    values = []
    try:
        for a in req["args"]:
            if "buf" in a:
                buffers[a["buf"]] = _Buffer(a, libc, poison)
                argtypes.append(ctypes.c_void_p)
                values.append(buffers[a["buf"]].addr)
            else:
                ct = getattr(ctypes, SCALAR_CTYPES[a["ctype"]])
                argtypes.append(ct)
                values.append(a["value"])
        fn = getattr(lib, req["launcher"])
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        grid = (ctypes.c_uint * 3)(*req["grid"])
        block = (ctypes.c_uint * 3)(*req["block"])
        hang = (ctypes.c_longlong * 4)()
        where = {name: [b.addr, b.nbytes] for name, b in buffers.items()}
        sys.stderr.write(f"@@specbound-launch {req['id']} {json.dumps(where)}\n")
        sys.stderr.flush()
        rc = fn(ctypes.cast(grid, ctypes.c_void_p), ctypes.cast(block, ctypes.c_void_p), int(req["descending"]),
                int(req["budget"]), ctypes.cast(hang, ctypes.c_void_p), *values)
        out = {"id": req["id"], "rc": rc, "hang": list(hang) if rc == 1 else None,
               "guards": {n: b.guards_changed() for n, b in buffers.items()},
               "data": {n: base64.b64encode(buffers[n].contents()).decode() for n in req.get("read", ())}}
        return out
    finally:
        for b in buffers.values():
            b.release()


def main(argv: list[str]) -> int:
    lib = ctypes.CDLL(argv[0])
    resp = open(int(argv[1]), "w", buffering=1)
    poison = _poison_functions()
    libc = _libc()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            out = _launch(lib, libc, req, poison)
        except Exception as e:  # noqa: BLE001 - a harness error is answered, not raised
            out = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"}
        resp.write(json.dumps(out) + "\n")
        resp.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
