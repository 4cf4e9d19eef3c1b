"""Building dataset folders: Hub layout, load_dataset offline, byte-identical rebuilds, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from needlebench.dataset.build import MANIFEST, build_dataset, shard_plan
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import get_config

CONFIGS = ["single_en_4k", "multi_retrieval_zh_4k", "atc_en"]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("built") / "ds"
    build_dataset(CONFIGS, folder, BuildOptions(), num_proc=1, progress=False)
    return folder


@pytest.mark.slow
def test_layout_and_load_dataset(built):
    from datasets import load_dataset

    manifest = json.loads((built / MANIFEST).read_text())
    assert list(manifest["configs"]) == CONFIGS
    for name in CONFIGS:
        spec = get_config(name)
        entry = manifest["configs"][name]
        assert entry["rows"] == spec.num_rows
        dataset = load_dataset(str(built), name, split="test")
        assert dataset.num_rows == spec.num_rows
        assert sum(dataset["haystack_tokens"]) == entry["haystack_tokens"]
        assert dataset.features["needle_depths"].feature.dtype == "float64"
    readme = (built / "README.md").read_text()
    assert "config_name: single_en_4k" in readme and "data/single_en_4k/test-*.parquet" in readme
    assert not [p for p in built.iterdir() if p.name.startswith(".")]


def test_row_groups_are_small_for_long_configs():
    from needlebench.dataset.build import _group_rows

    assert _group_rows(get_config("single_en_1000k")) <= 4
    assert _group_rows(get_config("single_en_4k")) >= 100
    # a shard's groups follow its own lengths: the 32k shard of a 1000k config is not cut into pairs
    assert _group_rows(get_config("single_en_1000k"), (32000,)) == _group_rows(get_config("single_en_32k")) >= 40
    assert len(shard_plan(get_config("single_en_1000k"))) == 8
    assert len(shard_plan(get_config("single_en_4k"))) == 1


def test_rebuild_is_byte_identical_with_two_processes(built, tmp_path):
    again = tmp_path / "again"
    build_dataset(CONFIGS, again, BuildOptions(), num_proc=2, progress=False)
    assert _files(again) == _files(built)


def test_a_shard_of_a_long_config_is_deterministic_with_row_groups_of_its_length(tmp_path):
    from needlebench.dataset.build import _build_shard, _group_rows

    spec = get_config("multi_retrieval_en_256k")
    shards = shard_plan(spec)
    assert [shard.lengths for shard in shards] == [(32000,), (128000,), (256000,)]
    for folder in (tmp_path / "one", tmp_path / "two"):
        _build_shard(shards[0], BuildOptions(), str(folder))
    assert _files(tmp_path / "one") == _files(tmp_path / "two")
    path = tmp_path / "one" / "test-00000-of-00003.parquet"
    assert pq.read_table(path).num_rows == spec.repeats
    group_rows = _group_rows(spec, (32000,))
    assert _group_rows(spec) < spec.repeats < group_rows  # 256k prompts would make too large a group
    assert pq.ParquetFile(path).metadata.num_row_groups == -(-spec.repeats // group_rows)


def test_extends_a_folder_of_the_same_recipe(built, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    build_dataset(["single_zh_4k"], copy, BuildOptions(), progress=False)
    manifest = json.loads((copy / MANIFEST).read_text())
    assert set(manifest["configs"]) == {*CONFIGS, "single_zh_4k"}
    with pytest.raises(NeedlebenchError, match="another recipe"):
        build_dataset(["single_zh_4k"], copy, BuildOptions(release_seed=5), progress=False)


def test_refuses_a_foreign_folder_even_with_overwrite(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(NeedlebenchError, match="not a needlebench dataset"):
            build_dataset(["atc_zh"], foreign, BuildOptions(), progress=False, overwrite=overwrite)
        assert _files(foreign) == {"notes.txt": b"mine"}
    empty = tmp_path / "empty"
    empty.mkdir()
    build_dataset(["atc_zh"], empty, BuildOptions(), progress=False)
    (empty / "notes.txt").write_text("mine")
    # --overwrite replaces what the manifest lists (data files, card, manifest) and keeps the rest
    build_dataset(["atc_en"], empty, BuildOptions(release_seed=3), progress=False, overwrite=True)
    assert (empty / "notes.txt").read_text() == "mine" and (empty / MANIFEST).exists()
    assert sorted(p.name for p in (empty / "data").iterdir()) == ["atc_en"]


def test_a_failing_build_leaves_nothing(tmp_path, monkeypatch):
    import needlebench.dataset.build as build_module

    def boom(*args, **kwargs):
        raise RuntimeError("crash in the middle")

    monkeypatch.setattr(build_module, "write_shard", boom)
    target = tmp_path / "crash"
    with pytest.raises(RuntimeError):
        build_dataset(["atc_en"], target, BuildOptions(), progress=False)
    assert not target.exists()


def test_a_failing_build_keeps_the_existing_configs(built, tmp_path, monkeypatch):
    import shutil

    import needlebench.dataset.build as build_module

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    before = _files(copy)
    monkeypatch.setattr(build_module, "write_shard", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("x")))
    with pytest.raises(RuntimeError):
        build_dataset(["single_en_4k"], copy, BuildOptions(), progress=False)
    assert _files(copy) == before


def test_compression_choice_changes_bytes_not_rows(built, tmp_path):
    plain = tmp_path / "plain"
    build_dataset(["atc_en"], plain, BuildOptions(compression="none"), progress=False)
    name = "data/atc_en/test-00000-of-00001.parquet"
    assert pq.ParquetFile(plain / name).metadata.row_group(0).column(0).compression == "UNCOMPRESSED"
    assert pq.ParquetFile(built / name).metadata.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(plain / name).equals(pq.read_table(built / name))
    assert json.loads((plain / MANIFEST).read_text())["recipe"]["compression"] == "none"
