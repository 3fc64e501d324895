"""docs/audit-releases.md is generated from the release reports saved in docs/audit-releases/, and
its bug-class tables are read from the row ids alone (a new kind of row gets its own table).

No download and no audit here: the saved reports are the input, and small records written here
stand in for releases.
"""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path
from types import SimpleNamespace

FA = "srt/layers/attention/flashattention_backend.py"


ROOT = Path(__file__).resolve().parents[1]
M = SimpleNamespace(**runpy.run_path(str(ROOT / "bench" / "audit_releases.py")))   # the bench script
D = SimpleNamespace(**runpy.run_path(str(ROOT / "bench" / "audit_releases_doc.py")))   # its document


def row(row_id, status, kind, file=FA, detail="", check="the reader stays inside the buffer"):
    return {"id": row_id, "status": status, "kind": kind, "subject": f"Backend ({file}:10) -> reader",
            "check": check, "detail": detail, "location": {"file": file, "line": 10}}


def record(version, rows, sites=None):
    return {"version": version, "mode": "no-kernels", "seconds": 1.0, "cpu_seconds": 1.0, "exit": 1,
            "report": {"rows": rows}, "sites": sites or {}}


def test_the_committed_doc_agrees_with_the_saved_reports():
    assert M.main(["--check"]) == 0


def test_check_fails_when_a_saved_verdict_changes(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(M.DEFAULT_DATA, data)
    newest = sorted(data.glob("0.5.*.json"), key=lambda p: D.version_key(p.stem))[-1]
    rec = json.loads(newest.read_text())
    judged = [r for r in rec["report"]["rows"] if r["id"].startswith(D.JUDGED) and "[" in r["id"]]
    judged[0]["status"], judged[0]["kind"] = ("overread", "finding") if judged[0]["kind"] != "finding" \
        else ("matched", "pass")
    newest.write_text(json.dumps(rec))
    assert M.main(["--check", "--data", str(data), "--out", str(M.DEFAULT_OUT)]) == 1
    # and --render brings the page back in line with the data
    out = tmp_path / "doc.md"
    assert M.main(["--render", "--data", str(data), "--out", str(out)]) == 0
    assert M.main(["--check", "--data", str(data), "--out", str(out)]) == 0


def test_a_new_kind_of_row_gets_a_table_with_first_last_and_fix():
    rid = "consumer.new_reader[Backend.buf@{}:{}]"
    recs = [record("0.5.0", [row("consumer.new_reader[Backend.buf@x]", "unknown", "not checked")]),
            record("0.5.1", [row("consumer.new_reader[Backend.buf@x]", "matched", "pass")]),
            record("0.5.2", [row("consumer.new_reader[Backend.buf@x]", "unknown", "not checked")]),
            record("0.5.3", [row(rid.format(FA, 10), "overread", "finding")], {rid.format(FA, 10): "Backend.capture"}),
            record("0.5.4", [row(rid.format(FA, 12), "holds only if", "finding",
                                 detail="holds only if seq_len[b] + n <= C: proved given ...")],
                   {rid.format(FA, 12): "Backend.replay"}),
            record("0.5.5", [row(rid.format(FA, 14), "matched", "pass")], {rid.format(FA, 14): "Backend.replay"})]
    text = D.render(recs, ["0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.4.post1", "0.5.5"])
    assert "### `consumer.new_reader`: the reader stays inside the buffer" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| `consumer.new_reader[Backend.buf]` |"))
    cells = [c.strip() for c in line.split("|")[1:-1]]
    # the site moved to another function and line between releases: still one buffer, one line,
    # named by the sites of the last release carrying it
    assert cells[2] == "`Backend.replay`: Backend -> reader"
    # (the buffer was matched in 0.5.1: only the releases since then went unjudged)
    assert cells[4:7] == ["0.5.3 (not judged in 0.5.2)", "0.5.4", "yes, 0.5.5 (`matched`)"]
    # a condition the family's refuted rows say the effect of
    assert cells[7] == "when seq_len[b] + n <= C fails, " + D.EFFECT["overread"]
    assert "not audited (a class's first or last release is bounded by the audited ones around these): 0.5.4.post1" \
        in text
    assert "No buffer or consumer finding." in text.split("## What 0.5.5")[1]


def test_the_newest_release_lists_what_it_still_carries_and_matched_families_have_no_table():
    kv = "buffer.draft_kv_indices[Backend.cuda_graph_kv_indices]"
    ok = "consumer.fine[Backend.buf]"
    recs = [record("0.5.3", [row(kv, "matched", "pass"), row(ok, "matched", "pass")]),
            record("0.5.4", [row(kv, "holds only if", "finding", detail="holds only if x <= y: ..."),
                             row(ok, "matched", "pass")])]
    text = D.render(recs)
    assert "### `consumer.fine`" not in text and "### `buffer.draft_kv_indices`" in text
    newest = text.split("## What 0.5.4, the newest audited release, still carries")[1].split("##")[0]
    assert f"* `{kv}` (`{FA}`): `holds only if`, a finding since 0.5.4: when x <= y fails" in newest
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{kv}` |"))
    # a buffer row (a kernel's writes) past its condition is an overrun: silent corruption
    assert "no: the newest audited release carries it" in line and D.EFFECT["overrun"] in line


def test_a_buffer_gone_from_a_release_is_not_called_fixed_by_a_match():
    rid = "consumer.custom_mask[Backend.buf/FULL_MASK@x]"
    recs = [record("0.5.3", [row(rid, "crash", "finding")]), record("0.5.4", [])]
    line = next(ln for ln in D.render(recs).splitlines() if ln.startswith("| `consumer.custom_mask[Backend.buf/FULL_MASK]` |"))
    assert "gone in 0.5.4 (no such buffer)" in line and D.EFFECT["crash"] in line


def test_sources_digest_ignores_only_the_version_file_and_the_page_names_equal_sources(tmp_path):
    def package(name, version, body):
        root = tmp_path / name / "sglang"
        (root / "srt").mkdir(parents=True)
        (root / "version.py").write_text(f"__version__ = {version!r}\n")
        (root / "srt" / "backend.py").write_text(body)
        return root
    a = M.sources_digest(package("a", "0.5.3", "x = 1\n"))
    assert a == M.sources_digest(package("b", "0.5.3.post1", "x = 1\n"))
    assert a != M.sources_digest(package("c", "0.5.3.post1", "x = 2\n"))
    recs = [{**record(v, []), "sources_sha256": d} for v, d in (("0.5.3", a), ("0.5.3.post1", a), ("0.5.4", "f"))]
    assert "2 distinct packages among the 3 releases" in D.render(recs)
    assert "equal sources, audited alike: 0.5.3, 0.5.3.post1." in D.render(recs)


def test_a_condition_alone_takes_the_family_effect_or_says_it_has_none():
    held = dict(detail="holds only if seq_len[b] + delta <= C: ...")
    recs = [record("0.5.3", [row("consumer.page_table[Backend@x]", "holds only if", "finding", **held),
                             row("consumer.unheard_of[Backend.buf]", "holds only if", "finding", **held)])]
    text = D.render(recs)
    reader = next(ln for ln in text.splitlines() if ln.startswith("* `consumer.page_table[Backend]`"))
    assert reader.endswith(f"when seq_len[b] + delta <= C fails, {D.EFFECT['overread']}.")
    new = next(ln for ln in text.splitlines() if ln.startswith("* `consumer.unheard_of[Backend.buf]`"))
    assert "no audited release refutes this family" in new


def test_json_lists_every_saved_release_rows_as_before(tmp_path):
    data = tmp_path / "data"
    for v in ("0.5.4", "0.5.3"):
        M.save(record(v, [row("consumer.x[B.buf]", "matched", "pass")]), data)
    out = tmp_path / "rows.json"
    assert M.main(["--render", "--data", str(data), "--out", str(tmp_path / "doc.md"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["version"] for r in rows] == ["0.5.3", "0.5.4"] and rows[0]["rows"][0]["id"] == "consumer.x[B.buf]"
    assert set(rows[0]) == {"version", "seconds", "exit", "rows"}
