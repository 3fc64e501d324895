"""The parent side of the CUDA-on-CPU harness: launches in a sanitized child process, and
what came back (outputs, or a sanitizer report turned into a finding).

Why a child process: a library built with ``-fsanitize=address`` loads only into a
process whose first library is the ASan runtime (so the child runs with ``LD_PRELOAD``),
a sanitizer report ends the process it happens in, and a loop the step budget does not
cover would stop the caller for good.  The audit itself therefore never loads the
library; a :class:`Session` keeps one child for many launches, restarts it after a
report, and kills it when a launch does not answer within ``timeout`` seconds (the
watchdog: a ``hang`` even for code the step budget does not bound).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from .build import LAUNCH_PREFIX, Library
from .child import SCALAR_CTYPES

ASAN_OPTIONS = ("detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:allocator_may_return_null=1:"
                "handle_segv=1:symbolize=1:detect_odr_violation=0")
UBSAN_OPTIONS = "halt_on_error=1:print_stacktrace=1:exitcode=87"
MARKER = "@@specbound-launch"


@dataclass(frozen=True)
class Buf:
    """A buffer argument: exactly ``nbytes`` bytes, initialised from ``data`` (or zero)."""

    name: str
    nbytes: int
    data: bytes | None = None
    elem: int = 1                  # element size, to report offsets in elements
    lazy: bool = False             # MAP_NORESERVE mapping (pages cost only where written)


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Any, ...]          # per kernel parameter: a Buf or a scalar
    budget: int                    # loop-condition evaluations per thread
    read: tuple[str, ...] = ()     # buffers to send back
    descending: bool = False       # run blocks and threads in descending order


@dataclass
class Outcome:
    kind: str                      # "ok", "oob", "ub", "hang", "crash", "error"
    message: str = ""
    buffers: dict[str, bytes] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)   # kernel, file, line, access, buffer, offset
    printed: list[str] = field(default_factory=list)      # the kernel's printf lines
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


# --- reading a sanitizer report -------------------------------------------------------------------

_ASAN = re.compile(r"ERROR: AddressSanitizer: ([\w-]+) on (?:unknown )?address (0x[0-9a-fA-F]+)")
_ACCESS = re.compile(r"\b(READ|WRITE) of size (\d+) at|caused by a (READ|WRITE) memory access")
_FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-fA-F]+ in (.+) (\S+?):(\d+)(?::\d+)?\s*$")
_UBSAN = re.compile(r"^(\S+?):(\d+):(\d+): runtime error: (.*)$")


def locate_address(address: int, buffers: dict[str, list[int]], elems: dict[str, int]) -> str:
    """An address described relative to the nearest buffer of the launch."""
    best = None
    for name, (start, nbytes) in buffers.items():
        dist = start - address if address < start else max(0, address - (start + nbytes))
        if best is None or dist < best[0]:
            best = (dist, name, start, nbytes)
    if best is None:
        return f"address {address:#x}"
    dist, name, start, nbytes = best
    e = elems.get(name, 1)
    extent = nbytes // e
    off = address - start
    if off < 0:
        return f"{-off} byte(s) before '{name}' (element {off // e} of a {extent}-element buffer)"
    if off >= nbytes:
        return (f"{off - nbytes} byte(s) past the end of '{name}' (element {off // e} of a "
                f"{extent}-element buffer)")
    return f"inside '{name}' (element {off // e} of {extent})"


def parse_report(text: str, source_rel: str, buffers: dict[str, list[int]], elems: dict[str, int]
                 ) -> tuple[str, str, dict[str, Any]] | None:
    """(kind, message, where) of the first sanitizer report in ``text``, or None."""
    lines = text.splitlines()
    kernel_frame = None
    for ln in lines:
        m = _FRAME.match(ln)
        if m and m.group(2).endswith(source_rel):
            kernel_frame = (m.group(1).split("(")[0].strip(), m.group(2), int(m.group(3)))
            break
    for ln in lines:
        m = _UBSAN.match(ln.strip())
        if m and "runtime error" in ln:
            where = {"file": m.group(1), "line": int(m.group(2)), "kernel": kernel_frame[0] if kernel_frame else None}
            return "ub", f"UndefinedBehaviorSanitizer: {m.group(4)} at {m.group(1)}:{m.group(2)}", where
    m = _ASAN.search(text)
    if m:
        address = int(m.group(2), 16)
        acc = _ACCESS.search(text)
        access = (acc.group(1) or acc.group(3)) if acc else "access"
        size = f" of {acc.group(2)} byte(s)" if acc and acc.group(2) else ""
        place = locate_address(address, buffers, elems)
        where = {"error": m.group(1), "access": access, "address": m.group(2), "buffer": place}
        at = ""
        if kernel_frame:
            where.update(kernel=kernel_frame[0], file=kernel_frame[1], line=kernel_frame[2])
            at = f" in {kernel_frame[0]} at {kernel_frame[1]}:{kernel_frame[2]}"
        return "oob", f"AddressSanitizer {m.group(1)}: {access}{size}{at}, {place}", where
    return None


# --- the child process ----------------------------------------------------------------------------

def child_env(library: Library) -> dict[str, str]:
    env = dict(os.environ)
    # ASan first (it must be), then libstdc++: Python does not load it, and ASan binds its
    # __cxa_throw interceptor at start-up (the step budget throws).
    env["LD_PRELOAD"] = f"{library.toolchain.libasan} {library.toolchain.libstdcxx}"
    env["ASAN_OPTIONS"] = ASAN_OPTIONS
    env["UBSAN_OPTIONS"] = UBSAN_OPTIONS
    return env


class Session:
    """One library, one child process at a time; ``run`` never raises for what the kernel does."""

    def __init__(self, library: Library, timeout: float = 60.0):
        self.library = library
        self.timeout = timeout
        self._proc = None
        self._log = None
        self._resp = None
        self._pending = b""
        self._next_id = 0
        self.launches = 0
        self.restarts = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._proc is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._drop()

    def _drop(self):
        if self._log is not None:
            self._log.close()
        if self._resp is not None:
            os.close(self._resp)
        self._proc = self._log = self._resp = None
        self._pending = b""

    def _start(self):
        r, w = os.pipe()
        self._log = tempfile.TemporaryFile(mode="w+b")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "specbound.engines.sglang.cuda.child", str(self.library.path), str(w)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=self._log, pass_fds=(w,), env=child_env(self.library))
        os.close(w)
        self._resp = r
        self.restarts += 1

    def _read_line(self, deadline: float) -> bytes | None:
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._resp], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._resp, 1 << 20)
            if not chunk:
                return b""
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def _log_since(self, launch_id: int) -> tuple[str, dict[str, list[int]] | None]:
        """The child's output after this launch's marker, and the buffers the marker lists
        (None when the child never reached the launch: then the output's tail)."""
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode(errors="replace")
        self._log.seek(0, os.SEEK_END)
        tag = f"{MARKER} {launch_id} "
        at = text.rfind(tag)
        if at < 0:
            return text[-4000:], None
        head_end = text.find("\n", at)
        buffers = json.loads(text[at + len(tag):head_end])
        nxt = text.find(MARKER, head_end)
        return text[head_end + 1: nxt if nxt >= 0 else len(text)], buffers

    def run(self, launch: Launch) -> Outcome:
        t0 = time.perf_counter()
        kernel = next((k for k in self.library.kernels if k.name == launch.kernel), None)
        if kernel is None:
            return Outcome("error", f"{launch.kernel} is not in the compiled library")
        if len(launch.args) != len(kernel.params):
            return Outcome("error", f"{launch.kernel} takes {len(kernel.params)} arguments, got {len(launch.args)}")
        args, elems = [], {}
        for p, a in zip(kernel.params, launch.args):
            if isinstance(a, Buf):
                args.append({"buf": a.name, "nbytes": a.nbytes, "lazy": a.lazy,
                             "data": base64.b64encode(a.data).decode() if a.data is not None else None})
                elems[a.name] = a.elem
            elif p.ctype in SCALAR_CTYPES:
                args.append({"ctype": p.ctype, "value": a})
            else:
                return Outcome("error", f"parameter {p.decl!r}: no ctypes type for {p.ctype!r}")
        if self._proc is None:
            self._start()
        self._next_id += 1
        lid = self._next_id
        req = {"id": lid, "launcher": LAUNCH_PREFIX + launch.kernel, "grid": list(launch.grid),
               "block": list(launch.block), "descending": int(launch.descending), "budget": launch.budget,
               "args": args, "read": list(launch.read)}
        self.launches += 1
        try:
            self._proc.stdin.write((json.dumps(req) + "\n").encode())
            self._proc.stdin.flush()
            line = self._read_line(time.monotonic() + self.timeout)
        except BrokenPipeError:
            line = b""
        if line is None:                          # the watchdog
            self._proc.kill()
            self._proc.wait()
            log, _ = self._log_since(lid)
            self._drop()
            return Outcome("hang", f"watchdog: no answer within {self.timeout:g} s (the child was killed)",
                           printed=_printed(log), seconds=time.perf_counter() - t0)
        if not line:                              # the child died: a sanitizer report, or a crash
            code = self._proc.wait()
            log, buffers = self._log_since(lid)
            self._drop()
            if buffers is None:
                tail = " | ".join(log.strip().splitlines()[-3:])
                return Outcome("error", f"the sanitized process exited with {code} before launching: {tail}",
                               seconds=time.perf_counter() - t0)
            parsed = parse_report(log, self.library.source_rel, buffers, elems)
            if parsed is None:
                tail = " | ".join(log.strip().splitlines()[-3:])
                return Outcome("crash", f"the sanitized process exited with {code} without a sanitizer report: {tail}",
                               printed=_printed(log), seconds=time.perf_counter() - t0)
            kind, message, where = parsed
            return Outcome(kind, message, where=where, printed=_printed(log), seconds=time.perf_counter() - t0)
        resp = json.loads(line)
        log, _ = self._log_since(lid)
        seconds = time.perf_counter() - t0
        if "error" in resp:
            return Outcome("error", resp["error"], seconds=seconds)
        bufs = {n: base64.b64decode(v) for n, v in resp["data"].items()}
        if resp["rc"] == 1:
            block, thread, line_no, budget = resp["hang"]
            return Outcome("hang", f"block {block}, thread {thread} spent its step budget ({budget} loop "
                           f"iterations) in the loop at {self.library.source_rel}:{line_no}",
                           buffers=bufs, where={"block": block, "thread": thread, "line": line_no,
                                                "file": self.library.source_rel, "kernel": launch.kernel},
                           printed=_printed(log), seconds=seconds)
        if resp["rc"] != 0:
            return Outcome("error", f"a C++ exception left {launch.kernel}", seconds=seconds)
        changed = {n: g for n, g in resp["guards"].items() if g}
        if changed:
            name, what = next(iter(changed.items()))
            return Outcome("oob", f"guard band of '{name}' written: {what}", buffers=bufs,
                           where={"buffer": name, "kernel": launch.kernel}, printed=_printed(log), seconds=seconds)
        return Outcome("ok", buffers=bufs, printed=_printed(log), seconds=seconds)


def _printed(log: str) -> list[str]:
    """The kernel's own output lines: everything before the first sanitizer line."""
    out = []
    for ln in log.splitlines():
        if ln.startswith("==") or "runtime error:" in ln or "AddressSanitizer" in ln:
            break
        if ln.strip():
            out.append(ln.strip())
    return out
