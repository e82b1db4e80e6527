"""`serve --preload auto` (engine.preload): the server restarts itself once with tcmalloc preloaded where the machine
has it, only as the `python -m engine` process (never a test's), and records what it ran with."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine import preload

pytestmark = pytest.mark.fast


def fake_exec(calls: list):
    def execve(path, argv, env):
        calls.append((path, argv, env))

    return execve


def test_auto_restarts_the_cli_process_once_with_the_allocator_first_in_ld_preload(monkeypatch, tmp_path):
    lib = tmp_path / "libtcmalloc_minimal.so.4"
    lib.write_bytes(b"")
    calls: list = []
    monkeypatch.setattr(preload, "TCMALLOC", (str(lib),))
    monkeypatch.setattr(preload, "_is_cli", lambda: True)
    monkeypatch.setattr(os, "execve", fake_exec(calls))
    monkeypatch.delenv(preload.MARK, raising=False)
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    preload.restart_with_allocator("auto", ["serve", "--target", "embedded"])
    ((path, argv, env),) = calls
    assert path == sys.executable and argv[1:] == ["-m", "engine", "serve", "--target", "embedded"]
    assert env["LD_PRELOAD"] == f"{lib}:/opt/other.so" and env[preload.MARK] == "1"
    assert int(env["TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"]) >= 1 << 40  # loading weights prints nothing
    monkeypatch.setenv(preload.MARK, "1")  # the restarted process: never again
    preload.restart_with_allocator("auto", ["serve"])
    assert len(calls) == 1


def test_none_a_missing_library_and_an_in_process_call_keep_the_process_as_it_is(monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(os, "execve", fake_exec(calls))
    monkeypatch.delenv(preload.MARK, raising=False)
    monkeypatch.setattr(preload, "_is_cli", lambda: True)
    preload.restart_with_allocator("none", ["serve"])
    monkeypatch.setattr(preload, "TCMALLOC", (str(tmp_path / "absent.so"),))
    preload.restart_with_allocator("auto", ["serve"])
    monkeypatch.undo()
    monkeypatch.setattr(os, "execve", fake_exec(calls))
    monkeypatch.delenv(preload.MARK, raising=False)
    preload.restart_with_allocator("auto", ["serve"])  # pytest's own process is not `python -m engine`
    assert calls == []


def test_a_process_says_what_it_runs_with_preloaded():
    lib = preload.allocator()
    if lib is None:
        pytest.skip("tcmalloc is not installed here (.ci/run installs libtcmalloc-minimal4)")
    code = "from engine.provenance import environment; print(environment()['preload'])"
    env = dict(os.environ) | {"LD_PRELOAD": lib} | preload.QUIET
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "libtcmalloc_minimal.so.4", out.stderr[-2000:]
