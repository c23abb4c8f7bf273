"""How the collective findings read: the terminal (a hang first, the stragglers table, the communication
line), report.html (the hang panel first, the Collectives section), JSON and CSV (synthetic rank traces)."""

from __future__ import annotations

import csv
import json

from comm_synth import job

from dynascope.render._analysis import summary_to_dict, write_csv
from dynascope.render.html import render_html
from dynascope.render.terminal import short_text, summary_text


def test_terminal_straggler_and_communication(tmp_path):
    _, s = job(tmp_path, world=3, steps=5, straggle=(2, 1, 500_000))
    text = summary_text(s, width=160)
    assert "Hang" not in text
    assert "Stragglers: the rank that issued collectives last, and what it did instead" in text
    row = next(line for line in text.splitlines() if "Python / untraced" in line)
    assert row.split()[:3] == ["1", "2", "500"]  # rank, step, late by (500 ms); no epoch column
    assert "Collectives: 20 joined across ranks · in flight" in text and "hidden under compute, exposed" in text
    # one host: no clocks table
    assert "Clocks:" not in text
    short = short_text(s, width=160)
    assert "Straggler: rank 1 issued step 2's collectives last, 500 ms late" in short
    assert "it was doing: Python / untraced 500 ms" in short


def test_a_hang_comes_first_everywhere(tmp_path):
    _, s = job(tmp_path, world=2, steps=5, hang=(2, 1))
    text = summary_text(s, width=160)
    # the first finding after the header and the reading's warnings (each trace says it was cut)
    hang = ("Hang: rank 0 waits in all_reduce (pg 0, seq 8) since step 2; rank 1 never issued it: it was in "
            "dataloader.next in step 2")
    assert hang in text
    assert text.rindex("warning:") < text.index("Hang:") < text.index("Ranks diverge") < text.index("Steps of the job")
    assert "Hang: ranks stopped while waiting" not in text  # the sentence says it; the rows are in --json
    html = render_html(s)
    main = html[html.index("<main>"):]
    assert main.index('id="hang"') < main.index('id="ranks"') < main.index('id="collectives-section"')
    assert "rank 0 waits in all_reduce (pg 0, seq 8) since step 2" in main
    assert 'data-table="hangs"' in main or 'id="hangs"' in main
    doc = summary_to_dict(s)
    assert [r["state"] for r in doc["hangs"]] == ["waiting", "never issued"]
    assert json.dumps(doc)  # lists (each rank's issue and completion) are JSON


def test_csv_has_the_collective_tables(tmp_path):
    _, s = job(tmp_path / "job", world=4, steps=3, per_host=2, shift_us=1_000_000)
    written = {p.stem: p for p in write_csv(s, tmp_path / "csv")}
    assert {"collectives", "stragglers", "clocks"} <= set(written)
    with open(written["clocks"], newline="") as handle:
        clocks = list(csv.DictReader(handle))
    assert [int(r["offset_us"]) > 999_000 for r in clocks] == [False, False, True, True]
    with open(written["collectives"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 12 and rows[0]["rank_list"] == "0; 1; 2; 3"
    text = summary_text(s, width=160)
    assert "Clocks: each rank's offset from the reference host's" in text and "aligned (residual" in text
