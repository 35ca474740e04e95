"""What the parse-time integrity check (attnprof.runtime.integrity) reads of a result set through its layout: the
captures its run tables were made from that are gone, and the rebuild epoch its markers hold."""

from __future__ import annotations

from attnprof.model.plan import Layout
from attnprof.runtime.integrity import lost_captures, rebuild_epoch


def test_lost_captures_are_the_repeat_rows_without_their_files(tmp_path):
    run = tmp_path / "r"
    for rel in ("s1/a/r1", "s1/a/r2", "s1/b/r1"):
        (run / "captures" / rel).mkdir(parents=True)
        (run / "captures" / rel / "status.json").write_text("{}")
    (run / "captures" / "s1" / "a" / "r1" / "trace.json.gz").write_bytes(b"")
    (run / "captures" / "s1" / "a" / "r2" / "trace.json.gz").write_bytes(b"")
    # repeats.csv rows: a has both repeats whole, b's repeat 1 lost its trace, b's repeat 2 and c are gone
    (run / "repeats.csv").write_text("variant,shape_key,repeat,status\na,s1,1,ok\na,s1,2,ok\nb,s1,1,ok\nb,s1,2,ok\nc,s1,1,failed\n")
    assert lost_captures(Layout(str(tmp_path)), "r", "repeats") == sorted(
        [str(run / "captures/s1/b/r1/trace.json.gz"), str(run / "captures/s1/b/r2/trace.json.gz"),
         str(run / "captures/s1/b/r2/status.json"), str(run / "captures/s1/c/r1/trace.json.gz"),
         str(run / "captures/s1/c/r1/status.json")])
    assert lost_captures(Layout(str(tmp_path)), "r", "control") == []  # no control.csv


def test_the_rebuild_epoch_is_the_highest_marker_and_one_more_when_bumped(tmp_path):
    lay = Layout(str(tmp_path))
    assert rebuild_epoch(lay, "x", False) == "0" and rebuild_epoch(lay, "x", True) == "1"
    for epoch in ("3", "12", "x"):  # rule rebuild's markers, and one that is no number
        marker = tmp_path / "x" / "logs" / "rebuild" / f"epoch-{epoch}"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
    assert rebuild_epoch(lay, "x", False) == "12" and rebuild_epoch(lay, "x", True) == "13"
    (tmp_path / "x" / "logs" / "rebuild-epoch").write_text("20\n")  # an earlier version's token counts too
    assert rebuild_epoch(lay, "x", False) == "20"


def test_a_file_that_never_existed_is_not_lost(tmp_path):
    """Issue 43 item 4: after a shape (or variant) is added to a published result set, its per-capture tables and
    plots do not exist yet; they were never published, so they are not 'gone'. A table or plot of a capture the
    published repeats.csv lists is lost when deleted; so is a run-wide file."""
    from attnprof.runtime.integrity import lost_files

    run = tmp_path / "results" / "r"
    run.mkdir(parents=True)
    (run / "report.html").write_text("x")
    (run / "repeats.csv").write_text("variant,shape_key,repeat\nnaive,s1,1\nnaive,s1,2\n")
    old = run / "tables" / "s1" / "naive" / "r2" / "forwards.csv"
    new_shape = run / "tables" / "s2" / "naive" / "r1" / "forwards.csv"
    new_repeat = run / "tables" / "s1" / "naive" / "r3" / "forwards.csv"
    plots = [run / "plots" / "s1" / "device_time.png", run / "plots" / "s2" / "device_time.png"]
    paths = [old, new_shape, new_repeat, *plots, run / "summary.csv"]
    assert lost_files(run / "report.html", paths) == sorted(str(p) for p in (old, plots[0], run / "summary.csv"))
    assert lost_files(run / "not-published.html", paths) == []


def test_a_file_as_its_rule_left_it_is_not_read_again_and_an_edited_one_is(tmp_path, monkeypatch):
    import os

    from attnprof.runtime import integrity

    run = tmp_path / "results" / "r"
    table = run / "summary.csv"
    table.parent.mkdir(parents=True)
    table.write_text("variant,ms\nnaive,1.0\n")
    integrity.record_checksums(run, [table])
    read = []
    real = integrity._sha256
    monkeypatch.setattr(integrity, "_sha256", lambda p: read.append(p) or real(p))
    # size and modification time as recorded (the sidecar's four fields): judged unchanged without a read
    assert integrity.changed_files(run, [table]) == [] and read == []
    # the same size, other bytes, a later modification time: read, and found changed
    table.write_text("variant,ms\nnaive,2.0\n")
    os.utime(table, ns=(table.stat().st_atime_ns, table.stat().st_mtime_ns + 10**9))
    assert integrity.changed_files(run, [table]) == [str(table)] and read == [table]
