"""Compile CUDA kernels for the CPU, under AddressSanitizer and UndefinedBehaviorSanitizer.

One translation unit per kernel file: :file:`shim.hpp`, then the file itself with every
loop bounded (:func:`.source.bound_loops`) under a ``#line`` directive naming its path
inside the sglang package (sanitizer reports then cite sglang's own file and line), then
an ``extern "C"`` launcher per kernel whose parameters are the kernel's, copied as
written.  The shared library is cached by a hash of everything that goes into it
(instrumented source, shim, launchers, compiler version, flags) under
``$SPECBOUND_CACHE_DIR`` or ``~/.cache/specbound/cuda-cpu``: a release is compiled once,
and identical sources of several releases share one library.

The compiler is ``$SPECBOUND_CXX`` or ``g++`` on ``PATH``; its sanitizer runtimes are
found with ``-print-file-name``.  :class:`Unavailable` names what is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .source import Kernel, bound_loops

FLAGS = ("-std=c++17", "-O0", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-fPIC", "-shared")
SHIM = Path(__file__).with_name("shim.hpp")
LAUNCH_PREFIX = "specbound_launch_"


class Unavailable(Exception):
    """The harness cannot run here; the message names the missing compiler or runtime."""


class BuildError(Exception):
    """The kernel file did not compile; the message holds the compiler's first errors."""


@dataclass(frozen=True)
class Toolchain:
    cxx: str
    version: str
    libasan: str          # absolute path of the ASan runtime (preloaded by the child)
    libubsan: str
    libstdcxx: str        # preloaded after it: ASan resolves its __cxa_throw interceptor at start-up


def _runtime(cxx: str, lib: str, what: str) -> str:
    try:
        out = subprocess.run([cxx, f"-print-file-name={lib}"], capture_output=True, text=True,
                             timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"cannot ask {cxx} for {lib}: {e}") from None
    path = Path(out)
    if not path.is_absolute() or not path.exists():
        raise Unavailable(f"no {what} runtime: `{cxx} -print-file-name={lib}` finds none "
                          f"(install gcc's sanitizer runtime, e.g. the libasan8/libubsan1 packages)")
    return str(path.resolve())


def probe_toolchain(cxx: str | None = None) -> Toolchain:
    """The C++ compiler and its ASan/UBSan runtimes, or :class:`Unavailable` saying which is missing."""
    name = cxx or os.environ.get("SPECBOUND_CXX") or "g++"
    path = shutil.which(name)
    if path is None:
        raise Unavailable(f"no C++ compiler: {name!r} is not on PATH (install g++ or set SPECBOUND_CXX)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[0].strip()
    except (OSError, subprocess.TimeoutExpired, IndexError) as e:
        raise Unavailable(f"C++ compiler {path} does not answer --version: {e}") from None
    return Toolchain(path, version, _runtime(path, "libasan.so", "AddressSanitizer (libasan)"),
                     _runtime(path, "libubsan.so", "UndefinedBehaviorSanitizer (libubsan)"),
                     _runtime(path, "libstdc++.so", "C++ standard library (libstdc++)"))


def cache_root() -> Path:
    override = os.environ.get("SPECBOUND_CACHE_DIR")
    base = Path(override) if override else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specbound"
    return base / "cuda-cpu"


@dataclass(frozen=True)
class Library:
    path: Path                 # the shared library
    kernels: tuple[Kernel, ...]
    source_rel: str            # the kernel file inside the sglang package, as cited in reports
    key: str                   # cache key (sha256 prefix)
    cached: bool               # found in the cache (no compile this time)
    seconds: float             # compile time (0 when cached)
    loops_bounded: int
    toolchain: Toolchain


def launcher_text(kernel: Kernel) -> str:
    decls = ", ".join(p.decl for p in kernel.params)
    names = ", ".join(p.name for p in kernel.params)
    return (f'extern "C" int {LAUNCH_PREFIX}{kernel.name}(const unsigned* grid, const unsigned* block, '
            f"int descending, long long budget, long long* hang{', ' if decls else ''}{decls}) {{\n"
            f"  return ::specbound::launch(grid, block, descending, budget, hang, [&] {{ "
            f"{kernel.qualified}({names}); }});\n}}\n")


def translation_unit(source_text: str, source_rel: str, kernels: tuple[Kernel, ...]) -> tuple[str, str, int]:
    """(kernel file as compiled, translation unit, loops bounded)."""
    bounded, count, _ = bound_loops(source_text)
    inc = f'#line 1 "{source_rel}"\n{bounded}'
    tu = '#include "shim.hpp"\n#include "kernels.inc"\n\n' + "\n".join(launcher_text(k) for k in kernels)
    return inc, tu, count


def build(source_text: str, source_rel: str, kernels: tuple[Kernel, ...], toolchain: Toolchain,
          root: Path | None = None, shim: str | None = None) -> Library:
    """Compile (or find in the cache) the library with a launcher for each of ``kernels``
    (``shim``: another shim's text, only for the tests that plant a bug in it)."""
    inc, tu, loops = translation_unit(source_text, source_rel, kernels)
    shim = shim if shim is not None else SHIM.read_text()
    h = hashlib.sha256()
    for part in (inc, tu, shim, toolchain.version, " ".join(FLAGS)):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()[:20]
    root = root or cache_root()
    final = root / key
    lib = final / "libkernels.so"
    if lib.is_file():
        return Library(lib, kernels, source_rel, key, True, 0.0, loops, toolchain)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        (work / "kernels.inc").write_text(inc)
        (work / "tu.cpp").write_text(tu)
        (work / "shim.hpp").write_text(shim)
        cmd = [toolchain.cxx, *FLAGS, "-o", str(work / "libkernels.so"), str(work / "tu.cpp")]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=600)
        seconds = time.perf_counter() - t0
        (work / "build.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            errors = [ln for ln in proc.stderr.splitlines() if "error" in ln][:3] or proc.stderr.splitlines()[-3:]
            raise BuildError(f"{toolchain.cxx} failed on {source_rel} (exit {proc.returncode}): "
                             + " | ".join(errors))
        (work / "meta.json").write_text(json.dumps({"source": source_rel, "kernels": [k.name for k in kernels],
                                                    "compiler": toolchain.version, "flags": FLAGS}))
        try:
            os.rename(work, final)
        except OSError:            # another process finished the same key first: use its copy
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Library(lib, kernels, source_rel, key, False, seconds, loops, toolchain)
