"""Recipes that travel: local inputs are recorded by file name, size and sha256, never by path (issue 10)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.sources.corpus import default_english
from support.needles import ENGLISH_NEEDLES, write_needles


def run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NEEDLEBENCH_CACHE": str(cache)},
    )


def only_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("building")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """single_en_4k (one depth) from a local haystack file and a local needles file."""
    root = tmp_path_factory.mktemp("recipes")
    inputs = root / "my inputs"
    inputs.mkdir()
    haystack = inputs / "essays.txt"
    haystack.write_text("\n\n".join(default_english().documents[:2]), encoding="utf-8")
    needles = write_needles(inputs / "needles.jsonl", ENGLISH_NEEDLES)
    cache = root / "cache"  # its own index of where inputs were read (earlier runs' copies would be found)
    out = root / "ds"
    args = ["build", "single_en_4k", "--depths", "50", "--haystack-en", str(haystack), "--needles", str(needles)]
    result = run(*args, "--out", str(out), cache=cache)
    assert result.returncode == 0, result.stderr
    return {"root": root, "out": out, "haystack": haystack, "needles": needles, "cache": cache}


@pytest.mark.slow
def test_manifest_and_card_hold_no_path(built: dict) -> None:
    manifest_text = (built["out"] / "needlebench.json").read_text(encoding="utf-8")
    card = (built["out"] / "README.md").read_text(encoding="utf-8")
    for text in (manifest_text, card):
        assert str(built["root"]) not in text and "my inputs" not in text
    recipe = json.loads(manifest_text)["recipe"]
    data = built["haystack"].read_bytes()
    assert recipe["haystack_en"] == {
        "file": "essays.txt",
        "kind": "file",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert recipe["needles"]["file"] == "needles.jsonl" and recipe["needles"]["kind"] == "file"
    assert recipe["haystack_zh"] is None  # defaults and Hub inputs stay as they were
    assert f"essays.txt (local file, {len(data):,} bytes, sha256 {recipe['haystack_en']['sha256']})" in card


@pytest.mark.slow
def test_verify_finds_the_inputs_where_they_were_built(built: dict) -> None:
    result = run("verify", str(built["out"]), cache=built["cache"])
    assert result.returncode == 0, result.stderr
    assert "all configs match" in result.stdout


@pytest.mark.slow
def test_moved_inputs_are_pointed_at_again(built: dict, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    haystack = moved / "renamed-essays.txt"  # moved and renamed: the hash finds it, the recorded name labels it
    needles = moved / "needles.jsonl"
    shutil.move(built["haystack"], haystack)
    shutil.move(built["needles"], needles)
    try:
        result = run("verify", str(built["out"]), cache=built["cache"])
        assert result.returncode == 2
        line = only_line(result)
        assert "the recipe's haystack_en is the local file essays.txt" in line and "pass --haystack-en PATH" in line

        result = run("verify", str(built["out"]), "--haystack-en", str(haystack), cache=built["cache"])
        assert result.returncode == 2
        assert "pass --needles PATH" in only_line(result)

        both = ["--haystack-en", str(haystack), "--needles", str(needles)]
        result = run("verify", str(built["out"]), *both, cache=built["cache"])
        assert result.returncode == 0, result.stderr
        assert "all configs match" in result.stdout

        wrong = moved / "other.txt"
        wrong.write_text("Some other text entirely.", encoding="utf-8")
        result = run(
            "verify", str(built["out"]), "--haystack-en", str(wrong), "--needles", str(needles), cache=built["cache"]
        )
        assert result.returncode == 2
        line = only_line(result)
        assert f"--haystack-en {wrong} has sha256" in line and "the recipe records the local file essays.txt" in line

        result = run("verify", str(built["out"]), *both, "--names", str(wrong), cache=built["cache"])
        assert result.returncode == 2
        assert "--names" in only_line(result) and "not a local file" in only_line(result)
    finally:
        shutil.move(haystack, built["haystack"])
        shutil.move(needles, built["needles"])


def test_recipe_round_trip_checks_the_hash(tmp_path: Path) -> None:
    haystack = tmp_path / "h.txt"
    haystack.write_text("One sentence. Another sentence.", encoding="utf-8")
    options = BuildOptions(haystack_en=str(haystack))
    recipe = json.loads(json.dumps(options.to_recipe()))
    assert str(tmp_path) not in json.dumps(recipe)
    copy = tmp_path / "copy" / "h.txt"
    copy.parent.mkdir()
    shutil.copy(haystack, copy)
    assert BuildOptions.from_recipe(recipe, {"haystack_en": str(copy)}).haystack_en == str(copy)
    copy.write_text("Changed.", encoding="utf-8")
    with pytest.raises(NeedlebenchError, match="has sha256 .* but the recipe records the local file h.txt"):
        BuildOptions.from_recipe(recipe, {"haystack_en": str(copy)})
    with pytest.raises(NeedlebenchError, match="does not exist"):
        BuildOptions.from_recipe(recipe, {"haystack_en": str(tmp_path / "gone.txt")})


def test_haystack_folder_is_recorded_by_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("Alpha.", encoding="utf-8")
    (folder / "b.txt").write_text("Beta.", encoding="utf-8")
    (folder / "notes.md").write_text("not read", encoding="utf-8")
    record = BuildOptions(haystack_en=str(folder)).to_recipe()["haystack_en"]
    assert record["file"] == "corpus" and record["kind"] == "folder" and record["size"] == 11
    (folder / "notes.md").write_text("still not read", encoding="utf-8")
    assert BuildOptions(haystack_en=str(folder)).to_recipe()["haystack_en"] == record
    (folder / "b.txt").write_text("Beta!", encoding="utf-8")
    assert BuildOptions(haystack_en=str(folder)).to_recipe()["haystack_en"]["sha256"] != record["sha256"]
