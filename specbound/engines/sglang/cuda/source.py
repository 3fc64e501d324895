"""Reading CUDA sources by structure: kernels, their parameters, what they use, and a
copy with every loop bounded by a step budget.

Everything works on the file's text with comments and string literals blanked out
(same length, newlines kept), so offsets and line numbers of the blanked text are those
of the original.  Nothing here compiles or runs anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")

# Constructs whose meaning depends on other threads running at the same time; a harness
# that runs one (block, thread) after another cannot execute them faithfully.
UNSUPPORTED = (
    (r"__shared__", "shared memory (__shared__)"),
    (r"\bextern\s+__shared__", "dynamic shared memory"),
    (r"__syncthreads\w*", "a block barrier (__syncthreads)"),
    (r"__syncwarp", "a warp barrier (__syncwarp)"),
    (r"\b(?:cg|cooperative_groups)::", "cooperative groups"),
    (r"\.sync\s*\(\s*\)", "a group barrier (.sync())"),
    (r"__shfl\w*", "a warp shuffle (__shfl*)"),
    (r"__(?:ballot|any|all|uni|match|reduce_\w+)_sync", "a warp vote/match/reduce intrinsic"),
    (r"__activemask", "a warp intrinsic (__activemask)"),
    (r"\batomic\w*\s*[(<]", "an atomic operation (atomic*)"),
    (r"\bcuda::atomic\w*", "an atomic operation (cuda::atomic)"),
    (r"__threadfence\w*", "a memory fence (__threadfence)"),
    (r"\basm\b|__asm__", "inline PTX (asm)"),
    (r"\bmbarrier\b|__mbarrier", "an mbarrier"),
    (r"__nanosleep", "__nanosleep (a spin wait on other threads)"),
)


def blank(text: str) -> str:
    """``text`` with comments, string and character literals replaced by spaces
    (newlines kept), so that a scan never matches inside them."""
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def match_close(blanked: str, open_at: int) -> int:
    """Index of the bracket closing the one at ``open_at`` (``(``/``{``/``[``)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opener = blanked[open_at]
    closer = pairs[opener]
    depth = 0
    for k in range(open_at, len(blanked)):
        ch = blanked[k]
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return k
    raise ValueError(f"unbalanced {opener!r} at offset {open_at}")


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


# --- kernels --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    decl: str        # as written, e.g. "int64_t* parent_list"
    name: str
    ctype: str       # the type as written, whitespace normalised, e.g. "int64_t*"

    @property
    def is_pointer(self) -> bool:
        return self.ctype.endswith("*")


@dataclass(frozen=True)
class Kernel:
    name: str
    namespace: str           # "sglang::speculative" ("" at file scope)
    params: tuple[Param, ...]
    body: str                # the body's blanked text, braces included
    line: int                # line of the __global__ declaration
    template: bool           # a template kernel (needs explicit instantiation to launch)

    @property
    def qualified(self) -> str:
        return f"::{self.namespace}::{self.name}" if self.namespace else f"::{self.name}"


def _split_params(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_param(decl: str) -> Param:
    decl = " ".join(decl.split("=", 1)[0].split())       # drop a default argument
    m = re.match(r"^(.*?)([A-Za-z_]\w*)\s*$", decl)
    if not m or not m.group(1).strip():
        raise ValueError(f"cannot read parameter {decl!r}")
    ctype = re.sub(r"\s*\*\s*", "*", m.group(1).strip())
    ctype = re.sub(r"\b__restrict__\b|\b__restrict\b", "", ctype).replace("  ", " ").strip()
    return Param(decl, m.group(2), ctype)


def _namespaces(blanked: str) -> list[tuple[int, int, str]]:
    spans = []
    for m in re.finditer(r"\bnamespace\s+([A-Za-z_][\w:]*)\s*\{", blanked):
        open_at = m.end() - 1
        spans.append((open_at, match_close(blanked, open_at), m.group(1)))
    return spans


def find_kernels(text: str) -> dict[str, Kernel]:
    """Every ``__global__`` function of a file, by name."""
    blanked = blank(text)
    spaces = _namespaces(blanked)
    out: dict[str, Kernel] = {}
    for m in re.finditer(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+([A-Za-z_]\w*)\s*\(",
                         blanked):
        open_at = m.end() - 1
        close = match_close(blanked, open_at)
        brace = blanked.find("{", close)
        if brace < 0 or blanked[close + 1:brace].strip():
            continue                           # a declaration, not a definition
        end = match_close(blanked, brace)
        before = blanked[max(0, m.start() - 400):m.start()]
        template = bool(re.search(r"template\s*<[^;{}]*>\s*$", before))
        ns = "::".join(name for a, b, name in spaces if a < m.start() < b)
        params = tuple(parse_param(p) for p in _split_params(blanked[open_at + 1:close]))
        out[m.group(1)] = Kernel(m.group(1), ns, params, blanked[brace:end + 1], line_of(text, m.start()),
                                 template)
    return out


def unsupported_constructs(kernel: Kernel) -> list[tuple[str, int]]:
    """``(what, line)`` of every construct of :data:`UNSUPPORTED` in the kernel's body."""
    found = []
    for pattern, what in UNSUPPORTED:
        for m in re.finditer(pattern, kernel.body):
            found.append((what, kernel.line + kernel.body.count("\n", 0, m.start())))
    return sorted(set(found), key=lambda x: (x[1], x[0]))


def find_kernel_files(root: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """For each kernel name, the first CUDA source file under ``root`` (sorted paths)
    that defines it as a ``__global__`` function."""
    found: dict[str, Path] = {}
    pattern = re.compile(r"__global__[^;{]*?\b(" + "|".join(map(re.escape, names)) + r")\s*\(")
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "__global__" not in text:
            continue
        for m in pattern.finditer(blank(text)):
            found.setdefault(m.group(1), path)
        if len(found) == len(names):
            break
    return found


# --- the step budget ------------------------------------------------------------------------------

STEP = "SPECBOUND_STEP()"


def _top_level_semicolons(blanked: str, a: int, b: int) -> list[int]:
    out, depth = [], 0
    for k in range(a, b):
        ch = blanked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ";" and depth == 0:
            out.append(k)
    return out


def bound_loops(text: str) -> tuple[str, int, list[int]]:
    """``text`` with every ``while`` / ``for`` condition prefixed by :data:`STEP`
    (which counts one step and throws when the thread's budget is spent).

    Insertions add no newline, so every line keeps its number.  Returns the new text,
    the number of loops bounded, and the lines of loops left alone (range-based ``for``,
    which always ends: it walks a finite range)."""
    blanked = blank(text)
    edits: list[tuple[int, int, str]] = []     # (start, end, replacement), non-overlapping
    skipped = []
    count = 0
    for m in re.finditer(r"\b(for|while)\s*\(", blanked):
        open_at = m.end() - 1
        close = match_close(blanked, open_at)
        if m.group(1) == "while":
            edits.append((open_at + 1, open_at + 1, f"{STEP} && ("))
            edits.append((close, close, ")"))
            count += 1
            continue
        semis = _top_level_semicolons(blanked, open_at + 1, close)
        if len(semis) != 2:
            skipped.append(line_of(text, m.start()))
            continue
        cond = text[semis[0] + 1:semis[1]]
        new = f" {STEP}" if not cond.strip() else f" {STEP} && ({cond.strip()})"
        edits.append((semis[0] + 1, semis[1], new))
        count += 1
    out = text
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + new + out[end:]
    return out, count, skipped


# --- the host wrapper ------------------------------------------------------------------------------

def host_checks(text: str, function: str) -> list[str] | None:
    """The ``CHECK_HOST(...)`` conditions of the definition of ``function`` in ``text``, in
    order and as written; None when the text does not define it."""
    blanked = blank(text)
    for m in re.finditer(r"\b" + re.escape(function) + r"\s*\(", blanked):
        close = match_close(blanked, m.end() - 1)
        brace = blanked.find("{", close)
        if brace < 0 or blanked[close + 1:brace].strip():
            continue                                   # a call or a declaration
        end = match_close(blanked, brace)
        out = []
        for c in re.finditer(r"\bCHECK_HOST\s*\(", blanked[brace:end]):
            a = brace + c.end() - 1
            out.append(" ".join(text[a + 1:match_close(blanked, a)].split()))
        return out
    return None


def find_host_wrapper(root: Path, function: str) -> tuple[Path, list[str]] | None:
    """The CUDA source file under ``root`` defining the host function, and its checks."""
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        text = path.read_text(encoding="utf-8", errors="replace")
        if function not in text:
            continue
        checks = host_checks(text, function)
        if checks is not None:
            return path, checks
    return None
