"""benchmarks.host_check: the read rate now against the best a limits file recorded on this CPU, a disturbed host
named in one line and exit code 3, and a sitting's runs since a given one tagged `disturbed` with the figure."""

from __future__ import annotations

import json

import pytest
from helpers import build_db

from benchmarks import host_check as H

pytestmark = pytest.mark.fast

CPU = "Some CPU (family 6, model 167)"


def limits_file(folder, name: str, cpu: str, mv: float, read: float) -> None:
    bandwidth = {"gb_per_s": {"median": mv}, "read_gb_per_s": {"median": read}}
    data = {"provenance": {"cpu": cpu}, "dtypes": [{"dtype": "bfloat16", "bandwidth": bandwidth}]}
    (folder / name).write_text(json.dumps(data))


def test_the_reference_is_the_best_read_this_cpu_recorded(tmp_path):
    limits_file(tmp_path, "limits-1.json", CPU, 24.0, 20.0)
    limits_file(tmp_path, "limits-2.json", CPU, 28.8, 27.9)  # the quiet morning
    limits_file(tmp_path, "limits-3.json", "Another CPU", 90.0, 90.0)
    (tmp_path / "limits-4.json").write_text("{cut short")
    assert H.reference(CPU, tmp_path) == (28.8, "limits-2.json")
    assert H.reference("Unmeasured CPU", tmp_path) is None


def test_below_the_floor_is_disturbed_and_says_by_how_much():
    disturbed, line = H.verdict(16.3, (28.8, "limits-2.json"), CPU, 0.8)
    assert disturbed and "0.57 of it, disturbed" in line and "28.8" in line and "limits-2.json" in line
    quiet, line = H.verdict(27.0, (28.8, "limits-2.json"), CPU, 0.8)
    assert not quiet and "quiet enough" in line
    unjudged, line = H.verdict(16.3, None, CPU, 0.8)
    assert not unjudged and "no limits file" in line


def test_a_disturbed_check_tags_the_runs_after_the_one_named_and_exits_3(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = build_db(url)
    first, second = sorted(r.id for r in store.list_runs())
    store.set_tags(second, ["sitting"])
    limits_file(tmp_path, "limits-1.json", CPU, 28.8, 27.9)
    monkeypatch.setattr(H, "RESULTS", tmp_path)
    monkeypatch.setattr(H, "read_rate", lambda reps: 15.0)
    monkeypatch.setattr(H, "cpu", lambda: {"cpu": CPU})
    assert H.main(["--db", url, "--last-run"]) == 0
    assert H.main(["--db", url, "--tag-since", str(first)]) == H.DISTURBED
    assert H.main(["--db", url, "--tag-since", str(first)]) == H.DISTURBED  # again: the note is not doubled
    runs = {r.id: r for r in store.list_runs()}
    assert "disturbed" not in runs[first].tags
    assert set(runs[second].tags) == {"sitting", "disturbed"}
    assert runs[second].note is not None and runs[second].note.count("host read 15.0 GB/s") == 1
    monkeypatch.setattr(H, "read_rate", lambda reps: 28.0)
    assert H.main(["--db", url, "--tag-since", "0"]) == 0
    assert "disturbed" not in {t for t in store.get_run(first).tags}  # a quiet check tags nothing
