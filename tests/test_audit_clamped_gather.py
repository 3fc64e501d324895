"""The clamped-gather audit (`consumer.clamped_gather` rows) on small sglang-shaped packages written
here: a backend that gathers its block table per batch from `req_to_token` rows, one column per
page.  Clamped to the row's last column (directly or through a local holding the width) it is
matched; clamped to the width itself it crashes, replayed by torch's IndexError; unclamped columns
are not judged (`unknown`); a backend without such a gather has no row."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbound import spec
from specbound.audit.report import CRASH, MATCHED, UNKNOWN
from specbound.engines.sglang.clamped_gather import check_clamped_gathers
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import audit_rows, write_sglang_package

BACKEND = """
import torch


class ToyBlockBackend:
    def __init__(self, req_to_token, page_size):
        self.req_to_token = req_to_token
        self.page_size = page_size

    def block_table(self, req_indices, max_blocks):
        max_cols = self.req_to_token.shape[1]
        cols = (torch.arange(max_blocks, dtype=torch.long) * self.page_size){clamp}
        return self.req_to_token[req_indices]{gather} // self.page_size
"""

ROW = "consumer.clamped_gather[ToyBlockBackend@"


def rows(root: Path, clamp: str, gather: str = "[:, cols]") -> list:
    backend = BACKEND.replace("{clamp}", clamp).replace("{gather}", gather)
    pkg = write_sglang_package(root, {"srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    return audit_rows(pkg.parent, check_clamped_gathers, PACKAGE)


def only(got):
    assert len(got) == 1 and got[0].id.startswith(ROW), [(r.id, r.status, r.detail[:160]) for r in got]
    return got[0]


def test_clamped_to_the_last_column_is_matched(tmp_path):
    assert only(rows(tmp_path, ".clamp(max=self.req_to_token.shape[1] - 1)")).status == MATCHED


def test_clamped_through_a_local_width_is_matched(tmp_path):
    assert only(rows(tmp_path, ".clamp(max=max_cols - 1)")).status == MATCHED


def test_clamped_to_the_width_crashes(tmp_path):
    row = only(rows(tmp_path, ".clamp(max=max_cols)"))
    assert row.status == CRASH, row.detail
    x = row.counterexample
    assert spec.gather_column(x["page"], x["page_size"], x["row_width"]) >= x["row_width"]
    assert row.method == "z3 + torch" and "IndexError" in row.detail


def test_unclamped_columns_are_not_judged(tmp_path):
    row = only(rows(tmp_path, ""))
    assert row.status == UNKNOWN and "not a clamp" in row.detail


def test_a_backend_without_a_column_gather_has_no_row(tmp_path):
    assert rows(tmp_path, ".clamp(max=max_cols - 1)", gather="") == []


# Ascend's block tables: a strided slice of the row, which torch clips to the row.
STRIDED = "consumer.strided_gather[ToyBlockBackend@"


@pytest.mark.parametrize("gather, length", [
    ("self.req_to_token[req_indices][:, ::self.page_size]", "the whole row"),
    ("self.req_to_token[req_indices, :max_blocks][:, ::self.page_size]", "`max_blocks`"),      # Ascend 0.5.6
    ("self.req_to_token[req_indices, 0 : max_blocks : self.page_size]", "`max_blocks`"),     # Ascend 0.5.23
])
def test_a_strided_slice_of_the_row_is_matched(tmp_path, gather, length):
    backend = BACKEND.replace("return self.req_to_token[req_indices]{gather} // self.page_size",
                              f"return {gather} // self.page_size").replace("{clamp}", "")
    pkg = write_sglang_package(tmp_path, {"srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    row = only_strided(audit_rows(pkg.parent, check_clamped_gathers, PACKAGE))
    assert row.status == MATCHED and "clipped by torch" in row.detail and f"a slice of {length}" in row.detail, \
        row.detail


def test_a_slice_from_an_offset_is_no_strided_gather(tmp_path):
    # columns lo + j * P: not the contract's columns, so not judged by it
    got = rows(tmp_path, "", gather="[:, 1::self.page_size]")
    assert [r.id for r in got if r.id.startswith(STRIDED)] == []
    assert only(got).status == UNKNOWN


def only_strided(got):
    assert len(got) == 1 and got[0].id.startswith(STRIDED), [(r.id, r.status, r.detail[:160]) for r in got]
    return got[0]
