"""A head learns from text the user already has (issue 67): `zoo build-head --text PATHS` teacher-forces the target
over the user's files, folders and JSONL first, within the fixed-text budget; what cannot be read, or holds a
held-out prompt, is one line before any answer is decoded."""

from __future__ import annotations

import json

import pytest

from engine.errors import PhoenixError
from engine.train.config import HeadBuildConfig
from engine.train.eagle3_build import validate
from engine.train.head_data import fixed_texts, user_texts

pytestmark = pytest.mark.fast


def test_own_text_comes_first_in_windows_from_files_folders_and_jsonl(tmp_path, tiny_tokenizer):
    code = tmp_path / "repo"
    code.mkdir()
    (code / "a.py").write_text("def area(r):\n    return 3.14159 * r * r\n" * 40)
    (code / "notes.md").write_text("Our service caches every request it answers.\n" * 40)
    (code / "image.png").write_bytes(b"\x89PNG not text")  # not a text suffix: left alone
    rows = tmp_path / "chats.jsonl"
    rows.write_text("\n".join(json.dumps({"text": f"question {i}: how do I sort a list?"}) for i in range(30)) + "\n")
    assert len(user_texts(f"{code},{rows}")) == 2 + 30
    cfg = HeadBuildConfig(target="embedded", text=f"{code},{rows}", fixed_text_tokens=3000, text_window=64)
    windows, info = fixed_texts(validate(cfg), tiny_tokenizer)
    own = info["own_text_tokens"]
    assert own > 0 and own % 64 == 0 and info["fixed_tokens"] <= 3000 + 64
    first = tiny_tokenizer.decode(windows[0])
    assert "area" in first  # the user's text leads, before the built-in sources
    assert sum(map(len, windows)) == info["fixed_tokens"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json\n", "not a JSON line"),
        (json.dumps({"prompt": "x"}) + "\n", 'an object with a "text" string'),
        (json.dumps([1, 2]) + "\n", 'an object with a "text" string'),
    ],
)
def test_a_jsonl_that_is_not_rows_of_text_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(PhoenixError, match=message):
        user_texts(str(path))


def test_a_missing_path_is_refused_before_any_work_and_binary_is_one_line(tmp_path):
    with pytest.raises(PhoenixError, match="--text .*nothere: no such file or folder"):
        validate(HeadBuildConfig(target="embedded", text=str(tmp_path / "nothere")))
    blob = tmp_path / "blob.txt"
    blob.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(PhoenixError, match="not UTF-8 text"):
        user_texts(str(blob))


def test_text_holding_a_held_out_prompt_is_refused(tmp_path, tiny_tokenizer):
    from engine.train.head_data import held_out

    _, held = held_out()
    leak = tmp_path / "leak.txt"
    leak.write_text("some context\n" + next(iter(held)) + "\n")
    with pytest.raises(PhoenixError, match="held-out prompt"):
        fixed_texts(HeadBuildConfig(target="embedded", text=str(leak), fixed_text_tokens=500), tiny_tokenizer)
