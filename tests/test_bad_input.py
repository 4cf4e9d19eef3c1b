"""Bad input: one clear line on stderr, exit status 2, nothing written (issue 10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import make_dataset_folder
from needlebench.dataset import build
from needlebench.dataset.build import BuildOptions, build_dataset
from needlebench.dataset.verify import verify_folder
from needlebench.errors import NeedlebenchError
from support.needles import ENGLISH_NEEDLES as ENGLISH


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def error_line(result: subprocess.CompletedProcess) -> str:
    """The single line on stderr (progress bars aside); fails when there is a traceback or several lines."""
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("building")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------- --out


@pytest.mark.slow
def test_out_on_a_filesystem_that_refuses_writes(tmp_path: Path) -> None:
    target = Path("/proc") / f"needlebench-{os.getpid()}"
    result = run("build", "atc_en", "--out", str(target))
    assert result.returncode == 2
    line = error_line(result)
    assert line.startswith("needlebench: error: cannot write output folder") and str(target) in line
    assert "--out" in line
    assert not target.exists()


@pytest.mark.slow
def test_out_below_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    result = run("build", "atc_en", "--out", str(blocker / "ds"))
    assert result.returncode == 2
    assert f"is below {blocker}, which is not a folder; choose another --out" in error_line(result)
    assert blocker.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_out_in_a_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount refuses the probe file (EROFS; root ignores chmod, so the refusal is simulated)."""
    import errno
    import tempfile

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(NeedlebenchError, match=r"cannot write output folder .*/ds: Read-only file system in .*--out"):
        build_dataset(["atc_en"], tmp_path / "ds", BuildOptions(), progress=False)
    assert list(tmp_path.iterdir()) == []


def test_out_checked_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check comes first: no corpus is loaded for an output that cannot be written."""
    monkeypatch.setattr(build, "_corpora", lambda *a: pytest.fail("loaded the corpora before checking --out"))
    with pytest.raises(NeedlebenchError, match="cannot write output folder"):
        build_dataset(["single_en_4k"], Path("/proc/needlebench-x/ds"), BuildOptions(), progress=False)


# ----------------------------------------------------------------------------------------------- verify


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("release_seed", "abc", "recipe key 'release_seed' is \"abc\"; expected an integer"),
        ("depths", "0,50", "recipe key 'depths'"),
        ("haystack_en", {"file": "x.txt"}, "recipe key 'haystack_en'"),
        ("compression", "gzip", "unknown compression 'gzip'"),
    ],
)
def test_verify_names_the_malformed_recipe_key(tmp_path: Path, key: str, value: object, expected: str) -> None:
    folder = tmp_path / "ds"
    manifest = make_dataset_folder(folder, {"atc_en": 3})
    manifest["recipe"][key] = value
    (folder / "needlebench.json").write_text(json.dumps(manifest), encoding="utf-8")
    result = run("verify", str(folder))
    assert result.returncode == 2
    line = error_line(result)
    assert "needlebench.json is invalid" in line and expected in line, line


def test_verify_fails_after_rows_is_edited(tmp_path: Path) -> None:
    folder = tmp_path / "ds"
    manifest = make_dataset_folder(folder, {"atc_en": 3, "single_en_4k": 4})
    assert verify_folder(folder, rebuild=False) == {}
    manifest["configs"]["atc_en"]["rows"] = 30
    (folder / "needlebench.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert verify_folder(folder, rebuild=False) == {"atc_en": "the manifest records 30 rows but the files hold 3"}


# ----------------------------------------------------------------------------------------------- --needles


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"arg2": "Silver Key"}, "the answer (arg2) does not occur in the needle"),
        (
            {"retrieval_question": "Is the Gold Cup on Green Island? Please answer in the format 'It is ______.'"},
            "the answer (arg2) occurs in the retrieval_question",
        ),
        ({"arg2": " "}, "has an empty answer (arg2)"),
    ],
)
def test_unanswerable_needles_are_rejected(tmp_path: Path, change: dict, expected: str) -> None:
    path = write_jsonl(tmp_path / "needles.jsonl", [ENGLISH[0], {**ENGLISH[1], **change}])
    result = run("build", "single_en_4k", "--needles", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    line = error_line(result)
    assert f"{path} line 2" in line and "arg1='Green Island'" in line and expected in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_too_few_needles_names_the_option_and_file(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "needles.jsonl", ENGLISH)
    out = tmp_path / "out"
    result = run("build", "multi_retrieval_en_4k", "--needles", str(path), "--out", str(out))
    assert result.returncode == 2
    line = error_line(result)
    assert (
        f"--needles {path}" in line
        and "needs 20 en needles" in line
        and "file's 2 en needles" in line
        and "fewer --depths" in line
    ), line
    assert not out.exists()


# ----------------------------------------------------------------------------------------------- --num-proc


def test_num_proc_is_capped_at_the_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    workers = []
    real = build.ProcessPoolExecutor

    def recording(*args, **kwargs):
        workers.append(kwargs["max_workers"])
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "ProcessPoolExecutor", recording)
    manifest = build_dataset(["atc_en", "atc_zh_open"], tmp_path / "ds", BuildOptions(), num_proc=999, progress=False)
    assert workers == [2]
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["needlebench: --num-proc 999 capped at 2: the build has 2 shards"]
    assert manifest["configs"]["atc_en"]["rows"] == 720


@pytest.mark.slow
def test_num_proc_above_one_shard_builds_in_process(tmp_path: Path) -> None:
    result = run("build", "atc_en", "--num-proc", "999", "--out", str(tmp_path / "ds"))
    assert result.returncode == 0, result.stderr
    assert "needlebench: --num-proc 999 capped at 1: the build has 1 shard" in result.stderr.splitlines()


# ----------------------------------------------------------------------------------------------- warnings


@pytest.mark.slow
def test_haystack_script_and_cycling_warnings(tmp_path: Path) -> None:
    """Chinese text as the English haystack, and a haystack shorter than the window: one line each, build goes on."""
    chinese = tmp_path / "sanguo.txt"
    chinese.write_text("话说天下大势，分久必合，合久必分。周末七国分争，并入于秦。\n" * 40, encoding="utf-8")
    out = tmp_path / "ds"
    result = run("build", "single_en_4k", "--haystack-en", str(chinese), "--depths", "50", "--out", str(out))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("needlebench: warning:")]
    assert len(warnings) == 2, result.stderr
    assert "English haystack sanguo.txt looks like Chinese text" in warnings[0] and "--haystack-zh" in warnings[0]
    assert "the en haystack sanguo.txt has" in warnings[1] and "it is repeated" in warnings[1]
    manifest = json.loads((out / "needlebench.json").read_text())
    assert manifest["configs"]["single_en_4k"]["rows"] == 40  # the build went on: 4 lengths x 10 repeats x 1 depth


def test_matching_scripts_give_no_warning() -> None:
    from needlebench.sources.corpus import Corpus
    from needlebench.sources.haystacks import script_mismatch

    english = Corpus("e.txt", "en", ("The quick brown fox jumps over the lazy dog, 三国.",), "local", "x")
    chinese = Corpus("z.txt", "zh", ("话说天下大势，分久必合 (Three Kingdoms)。",), "local", "x")
    assert script_mismatch(english) is None and script_mismatch(chinese) is None
    latin_as_zh = Corpus("e.txt", "zh", ("The quick brown fox jumps over the lazy dog.",), "local", "x")
    assert "looks like Latin-script text" in script_mismatch(latin_as_zh)
