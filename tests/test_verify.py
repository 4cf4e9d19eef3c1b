"""Verify: files on disk against the manifest, and rebuilding from the recorded recipe."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import make_dataset_folder
from needlebench.dataset import build, verify, writer
from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.verify import verify_folder
from needlebench.errors import NeedlebenchError

REAL_CONFIG = "single_en_4k"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    make_dataset_folder(tmp_path / "ds", {"single_en_4k": 4, "atc_en": 3})
    return tmp_path / "ds"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real build of one small config (the default corpora, release seed and tokenizer)."""
    from needlebench.dataset.build import BuildOptions, build_dataset

    out = tmp_path_factory.mktemp("built") / "ds"
    build_dataset([REAL_CONFIG], out, BuildOptions(), progress=False)
    return out


def _alter(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_fingerprint_is_the_builders(folder: Path) -> None:
    assert verify.fingerprint_files is writer.fingerprint_files is build.fingerprint_files  # one definition
    extra = folder / "data" / "atc_en" / "test-00001-of-00002.parquet"
    shutil.copy(folder / "data" / "single_en_4k" / "test-00000-of-00001.parquet", extra)
    files = sorted((folder / "data" / "atc_en").glob("*.parquet"), reverse=True)
    assert writer.fingerprint_files(files) == writer.fingerprint_files(list(reversed(files)))


def test_intact_folder_passes_the_file_check(folder: Path) -> None:
    assert verify_folder(folder, None, rebuild=False) == {}
    assert verify_folder(folder, ["atc_en"], rebuild=False) == {}


def test_altered_missing_and_unlisted_files_are_reported_with_reasons(folder: Path) -> None:
    _alter(folder / "data" / "atc_en" / "test-00000-of-00001.parquet")
    assert verify_folder(folder, None, rebuild=False) == {
        "atc_en": "files on disk do not match the manifest fingerprint"
    }
    assert verify_folder(folder, ["single_en_4k"], rebuild=False) == {}
    (folder / "data" / "single_en_4k" / "test-00000-of-00001.parquet").unlink()
    reasons = verify_folder(folder, rebuild=False)
    assert list(reasons) == ["single_en_4k", "atc_en"]  # iterates over the names, in manifest order
    assert reasons == {
        "single_en_4k": "missing file data/single_en_4k/test-00000-of-00001.parquet",
        "atc_en": "files on disk do not match the manifest fingerprint",
    }


def _copy_shard(folder: Path, config: str, relative: str) -> None:
    target = folder / "data" / config / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "data" / config / "test-00000-of-00001.parquet", target)


def test_only_unlisted_files_the_card_loads_count_as_differences(folder: Path) -> None:
    _copy_shard(folder, "atc_en", "notes.parquet")  # not test-*.parquet: load_dataset ignores it
    _copy_shard(folder, "atc_en", "old/test-00000-of-00001.parquet")  # in a subfolder: ignored too
    assert verify_folder(folder, rebuild=False) == {}
    _copy_shard(folder, "atc_en", "test-extra.parquet")
    assert verify_folder(folder, rebuild=False) == {
        "atc_en": "unlisted file data/atc_en/test-extra.parquet (it would be loaded with the config)"
    }


def test_verify_sees_the_files_load_dataset_resolves(folder: Path) -> None:
    from datasets.data_files import resolve_pattern
    from huggingface_hub import DatasetCard

    for relative in ("notes.parquet", "old/test-1.parquet", "test-extra.parquet", "test-.parquet"):
        _copy_shard(folder, "atc_en", relative)
    configs = {entry["config_name"]: entry for entry in DatasetCard.load(folder / "README.md").data.configs}
    pattern = configs["atc_en"]["data_files"][0]["path"]
    resolved = {Path(p).relative_to(folder).as_posix() for p in resolve_pattern(pattern, base_path=str(folder))}
    assert resolved == verify.loaded_files(folder, "atc_en")
    assert resolved == {
        "data/atc_en/test-00000-of-00001.parquet", "data/atc_en/test-extra.parquet", "data/atc_en/test-.parquet",
    }  # fmt: skip


@pytest.mark.parametrize("moved", ["data/atc_en/part-00000.parquet", "data/atc_en/sub/test-00000-of-00001.parquet"])
def test_a_listed_file_the_card_does_not_load_is_reported(folder: Path, moved: str) -> None:
    listed = "data/atc_en/test-00000-of-00001.parquet"
    (folder / moved).parent.mkdir(parents=True, exist_ok=True)
    (folder / listed).rename(folder / moved)
    manifest = json.loads((folder / "needlebench.json").read_text())
    manifest["configs"]["atc_en"]["files"] = [moved]  # same bytes, same fingerprint
    (folder / "needlebench.json").write_text(json.dumps(manifest))
    assert verify_folder(folder, rebuild=False) == {
        "atc_en": f"listed file {moved} is not read by load_dataset (the card loads data/atc_en/test-*.parquet)"
    }


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda m: m.update(format="other"), "not a needlebench manifest"),
        (lambda m: m.update(format_version=7), "format_version 7"),
        (lambda m: m.update(configs={}), "lists no configs"),
        (lambda m: m["configs"]["atc_en"].update(files=["../../etc/passwd.parquet"]), "'../../etc/passwd.parquet'"),
        (lambda m: m["configs"]["atc_en"].update(files=["data/single_en_4k/x.parquet"]), "data/atc_en/"),
        (lambda m: m["configs"]["atc_en"].update(fingerprint="xyz"), "sha256"),
    ],
)
def test_bad_manifests_are_one_line_errors(folder: Path, change, needle: str) -> None:
    path = folder / "needlebench.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(NeedlebenchError) as excinfo:
        verify_folder(folder, None, rebuild=False)
    assert needle in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_one_manifest_reader_for_every_folder_reader(folder: Path, tmp_path: Path) -> None:
    """``read_manifest`` is the one reader (build, verify, publish, report, eval): a malformed manifest is the same
    one-line error whether a missing manifest is allowed or not; only a folder without one differs (None or an
    error)."""
    for reader in (build, verify):  # the modules read through it, keeping no reader of their own
        assert not hasattr(reader, "read_manifest") or reader.read_manifest is read_manifest
    path = folder / "needlebench.json"
    good = path.read_text()
    recipe = json.loads(good)
    recipe["recipe"]["release_seed"] = "one"
    for text in ("{not json", '{"format": "other"}', "[1, 2]", json.dumps(recipe)):
        path.write_text(text)
        with pytest.raises(NeedlebenchError) as required:
            read_manifest(folder)
        with pytest.raises(NeedlebenchError) as optional:
            read_manifest(folder, missing_ok=True)
        assert str(required.value) == str(optional.value) and "\n" not in str(required.value)
        assert str(path) in str(required.value)
    path.write_text(good)
    assert read_manifest(folder) == read_manifest(folder, missing_ok=True) == json.loads(good)
    for empty in (tmp_path / "empty", tmp_path / "absent"):
        if empty.name == "empty":
            empty.mkdir()
        assert read_manifest(empty, missing_ok=True) is None
        with pytest.raises(NeedlebenchError, match="needlebench build|not a needlebench dataset"):
            read_manifest(empty)
    path.write_bytes(b'{"format": "needlebench-dataset", "x": "\xff"}')
    with pytest.raises(NeedlebenchError) as excinfo:
        read_manifest(folder)
    assert "needlebench.json" in str(excinfo.value) and "\n" not in str(excinfo.value)  # not a traceback


def test_not_a_dataset_and_unknown_configs_are_errors(folder: Path, tmp_path: Path) -> None:
    with pytest.raises(NeedlebenchError, match="does not exist"):
        verify_folder(tmp_path / "missing", None)
    (tmp_path / "plain").mkdir()
    with pytest.raises(NeedlebenchError, match="not a needlebench dataset"):
        verify_folder(tmp_path / "plain", None)
    make_dataset_folder(tmp_path / "again", {"atc_en": 2})
    with pytest.raises(NeedlebenchError) as excinfo:
        verify_folder(tmp_path / "again", ["atc_zh"], rebuild=False)
    assert "'atc_zh'" in str(excinfo.value) and "atc_en" in str(excinfo.value)


def test_rebuild_reproduces_a_real_build(built: Path) -> None:
    assert verify_folder(built, [REAL_CONFIG], num_proc=2) == {}


def test_rebuild_detects_files_and_recipes_that_differ(built: Path, tmp_path: Path) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(built, altered)
    _alter(altered / "data" / REAL_CONFIG / "test-00000-of-00001.parquet")
    assert verify_folder(altered, rebuild=False) == {REAL_CONFIG: "files on disk do not match the manifest fingerprint"}

    reseeded = tmp_path / "reseeded"
    shutil.copytree(built, reseeded)
    manifest = json.loads((reseeded / "needlebench.json").read_text())
    manifest["recipe"]["release_seed"] += 1  # the files no longer follow from the recorded recipe
    (reseeded / "needlebench.json").write_text(json.dumps(manifest))
    assert verify_folder(reseeded, None, rebuild=False) == {}
    reasons = verify_folder(reseeded)
    assert list(reasons) == [REAL_CONFIG] and reasons[REAL_CONFIG].startswith("rebuilding from the recorded recipe")


def test_a_real_build_has_a_loadable_card(built: Path) -> None:
    from huggingface_hub import DatasetCard

    card = DatasetCard.load(built / "README.md")
    assert card.data.configs[0]["config_name"] == REAL_CONFIG
    manifest = read_manifest(built)
    assert manifest["configs"][REAL_CONFIG]["fingerprint"] in card.text


def _cli(*args: str) -> subprocess.CompletedProcess:
    """The `needlebench` console script (exit 0 ok, 1 differs, 2 bad input)."""
    command = [sys.executable, "-c", "from needlebench.cli import main; main()", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_cli_verify_rejects_bad_input(tmp_path: Path) -> None:
    result = _cli("verify", str(tmp_path / "nothing-here"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_verify_exits_1_naming_the_config_that_differs(built: Path, tmp_path: Path) -> None:
    altered = tmp_path / "altered"
    shutil.copytree(built, altered)
    _alter(altered / "data" / REAL_CONFIG / "test-00000-of-00001.parquet")
    result = _cli("verify", str(altered))
    assert REAL_CONFIG in result.stdout
    assert result.returncode == 1
