"""Test support: write a small sglang-shaped package (the audit reads it like a release)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import AuditReport

from .bindings import BINDINGS


def write_sglang_package(root: Path, files: dict[str, str], version: str = "0.0.0+fake") -> Path:
    """``root/sglang`` with ``__init__.py``, a ``_version.py`` and ``files`` (path inside the
    package -> source, dedented); returns the package folder."""
    pkg = Path(root) / "sglang"
    (pkg / "srt").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text(f"__version__ = version = {version!r}\n")
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return pkg


def planted_copy(path, old: str, new: str, dest: Path) -> str:
    """``dest``: the kernel file at ``path`` with ``old`` (which must occur exactly once: a
    planted bug that matches nothing checks nothing) replaced by ``new``; its path."""
    text = open(path).read()
    assert text.count(old) == 1, f"the planted change no longer matches the source: {old!r}"
    Path(dest).write_text(text.replace(old, new))
    return str(dest)


def audit_rows(root: Path, check, package: str) -> list:
    """The rows ``check(program, report)`` adds for the package at ``root`` (imported as ``package``)."""
    rep = AuditReport(str(root), "toy", "test", engine=BINDINGS.engine)
    check(Program(SourceIndex(root), package), rep)
    return rep.rows


# --- a decode reservation, as the reservation rows read it (sglang 0.5.23's, reduced) -------------

# allocation_sizing: the row's headroom and the reserve are what a test varies.
SIZING = """
from sglang.srt.runtime_context import get_alloc_page_size, get_spec, max_speculative_num_draft_tokens


def get_alloc_len_per_decode() -> int:
    spec = get_spec()
    return max(spec.speculative_eagle_topk * spec.speculative_num_steps, max_speculative_num_draft_tokens())


def get_alloc_reserve_per_decode() -> int:
    return {reserve}


def get_req_to_token_extra_context_len() -> int:
    spec = get_spec()
    page = get_alloc_page_size()
    return {extra}
"""

# The scheduler's bound on a request still decoding (tp_worker.py:421, scheduler.py:2714 in 0.5.23).
TP_WORKER = """
class TpModelWorker:
    def __init__(self):
        max_req_len = min(
            self.model_config.context_len - 1,
            self.model_runner.effective_logical_max_total_num_tokens - 1,
        )
"""
SCHEDULER = """
class Scheduler:
    def clamp(self, req, input_len, max_new_tokens):
        return max(0, min(max_new_tokens, self.max_req_len - input_len - 1))
"""
CONTEXT = ("def get_spec():\n    pass\n\n\ndef get_alloc_page_size():\n    pass\n\n\n"
           "def max_speculative_num_draft_tokens():\n    pass\n")


# eagle_prepare_for_decode from 0.5.16 on, reduced: the reservation rounded up to whole pages.
ALIGNED = """
def page_aligned_decode_alloc_lens(reqs, *, reserve, page_size):
    return [(r.kv.kv_committed_len + reserve + page_size - 1) // page_size * page_size for r in reqs]
"""
SGLANG_RESERVE = "2 * get_alloc_len_per_decode()"

# memory_pool and KVCacheConfigurator._build_default_req_pool, reduced: a pool builder passing
# max_context_len = context_len + get_req_to_token_extra_context_len()
POOL = """
class ReqToTokenPool:
    def __init__(self, size, max_context_len, device):
        self.max_context_len = max_context_len
"""
CONFIGURATOR = """
from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool


class KVCacheConfigurator:
    def _build_default_req_pool(self, *, max_num_reqs):
        extra_max_context_len = get_req_to_token_extra_context_len()
        return ReqToTokenPool(
            size=max_num_reqs,
            max_context_len=self.model_config.context_len + extra_max_context_len,
            device=self.device,
        )
"""


def reservation_files(extra: str = "0", reserve: str | None = SGLANG_RESERVE, scheduler: str = SCHEDULER,
                      aligned: bool = True) -> dict:
    """The files a release's decode reservation is read from: ``extra`` the row's headroom,
    ``reserve`` what ``get_alloc_reserve_per_decode`` returns (None: a release without it),
    ``aligned`` whether the reservation is rounded up to whole pages."""
    sizing = SIZING.replace("{extra}", extra).replace("{reserve}", reserve or "0")
    if reserve is None:
        sizing = sizing.replace("def get_alloc_reserve_per_decode", "def _no_helper")
    files = {"srt/mem_cache/allocation_sizing.py": sizing, "srt/runtime_context.py": CONTEXT,
             "srt/managers/tp_worker.py": TP_WORKER, "srt/managers/scheduler.py": scheduler}
    if aligned:
        files["srt/speculative/eagle_utils.py"] = ALIGNED
    return files
