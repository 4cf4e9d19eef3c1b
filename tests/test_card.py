"""Dataset cards: YAML metadata, body, atomic writing, and offline loading of a folder with the card."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hub_server import client_env, make_dataset_folder, run_client
from needlebench.dataset import card
from needlebench.errors import NeedlebenchError
from needlebench.tasks.schema import features_for

CONFIGS = {"single_en_4k": 5, "atc_en": 3}


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    make_dataset_folder(tmp_path / "ds", CONFIGS)
    return tmp_path / "ds"


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "needlebench.json").read_text(encoding="utf-8"))


def test_yaml_metadata_lists_configs_features_and_hub_fields(folder: Path) -> None:
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    from huggingface_hub import DatasetCard

    loaded = DatasetCard.load(folder / "README.md")
    data = loaded.data
    assert data.license == "apache-2.0"  # public-domain corpora: the generator's licence
    assert data.language == ["en"]
    assert data.task_categories == ["question-answering", "text-generation"]
    assert data.size_categories == ["n<1K"]
    assert {"long-context", "needle-in-a-haystack"} <= set(data.tags)
    assert data.pretty_name
    configs = MetadataConfigs.from_dataset_card_data(data)
    assert list(configs) == ["single_en_4k", "atc_en"]  # registry order
    assert configs["single_en_4k"]["data_files"] == [{"split": "test", "path": "data/single_en_4k/test-*.parquet"}]
    assert configs["atc_en"]["data_files"][0]["path"] == card.data_files_pattern("atc_en")  # what verify checks
    assert configs.get_default_config_name() == "single_en_4k"
    infos = DatasetInfosDict.from_dataset_card_data(data)
    assert infos["single_en_4k"].features == features_for("single")
    assert infos["atc_en"].features == features_for("atc")
    assert infos["atc_en"].splits["test"].num_examples == 3
    assert infos["atc_en"].download_size == (folder / "data/atc_en/test-00000-of-00001.parquet").stat().st_size


def test_body_documents_tasks_recipe_configs_usage_citations(folder: Path) -> None:
    text = card.render_card(_manifest(folder), folder, repo_id="org/needlebench", version="1.2.0")
    body = text.split("\n---\n", 1)[1]
    assert "**S-RT**" in body and "**ATC**" in body and "Counting-Stars." not in body.split("## How")[0]
    manifest = _manifest(folder)
    for name, entry in manifest["configs"].items():
        assert f"`{name}`" in body and entry["fingerprint"] in body
    assert "| en | fixture-en | test fixture | r1 | public domain |" in body
    assert "`release_seed` | 20240711" in body and "cl100k_base" in body and "needlebench` 0.1.0" in body
    assert 'load_dataset("org/needlebench", "single_en_4k", split="test", revision="v1.2.0")' in body
    assert "lm_eval --model vllm" in body and "--include_path harness_tasks --tasks needlebench_single" in body
    assert "needlebench eval" in body and "needlebench verify --repo org/needlebench --revision v1.2.0" in body
    assert "2407.11963" in body and "2403.11802" in body
    assert "## Changelog" in body and "**v1.2.0**" in body
    assert "\n\n| **Total**" not in body  # the total row stays in the table


def test_loaded_files_follow_the_data_files_glob() -> None:
    assert card.is_loaded_file("atc_en", "data/atc_en/test-00000-of-00001.parquet")
    for path in (
        "data/atc_en/notes.parquet",
        "data/atc_en/sub/test-00000-of-00001.parquet",
        "data/atc_en/test-0.json",
        "data/atc_en_512/test-0.parquet",
        "x/data/atc_en/test-0.parquet",
    ):
        assert not card.is_loaded_file("atc_en", path), path


def test_atc_description_counts_names_and_relations_like_the_grid() -> None:
    from needlebench.tasks.grid import registry

    counts = {name: spec.needle_counts for name, spec in registry().items() if spec.family == "atc"}
    assert (min(counts["atc_en"]), max(counts["atc_en"]), max(counts["atc_en_512"])) == (2, 19, 512)
    text = card.TASK_DESCRIPTIONS["atc"]
    assert "2 to 19 names" in text and "1 to 18 relations" in text and "up to 512 names" in text
    assert "links" not in text


def test_card_uses_the_grid_directly() -> None:
    assert not hasattr(card, "config_spec")  # no pass-through around grid.get_config


def test_changelog_entries_are_rendered_newest_first(folder: Path) -> None:
    changelog = [{"version": "v2.0.0", "changes": ["added atc_en"]}, {"version": "v1.0.0", "changes": ["first"]}]
    text = card.render_card(_manifest(folder), changelog=changelog)
    assert text.index("**v2.0.0**: added atc_en") < text.index("**v1.0.0**: first")


@pytest.mark.slow
def test_load_dataset_reads_the_folder_offline(folder: Path) -> None:
    client = client_env("http://127.0.0.1:9", folder.parent / "hf") | {"HF_HUB_OFFLINE": "1"}  # no Hub at all
    calls = [
        {"target": "hub_server:load_rows", "args": [str(folder), "atc_en"]},
        {"target": "hub_server:load_rows", "args": [str(folder), None]},  # the default config
    ]
    atc_rows, default_rows = run_client(calls, client)
    assert [row["id"] for row in atc_rows] == ["id-0", "id-1", "id-2"]
    assert len(default_rows) == CONFIGS["single_en_4k"] and default_rows[0]["config"] == "single_en_4k"


def test_write_card_replaces_readme_atomically(folder: Path) -> None:
    (folder / "README.md").write_text("old", encoding="utf-8")
    path = card.write_card(folder, _manifest(folder), repo_id="org/x", version="0.1.0")
    assert path.read_text(encoding="utf-8").startswith("---\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "data", "needlebench.json"]


def test_licence_rules() -> None:
    assert card.card_license({"en": {"license": "public domain"}}) == ("apache-2.0", {})
    assert card.card_license({"en": {"license": "MIT"}, "zh": {"license": "public domain"}}) == ("mit", {})
    license_id, extra = card.card_license({"en": {"name": "x", "license": "unknown (user supplied)"}})
    assert license_id == "other" and "x (unknown (user supplied))" in extra["license_details"]


def test_size_categories() -> None:
    assert card.size_category(999) == "n<1K"
    assert card.size_category(1000) == "1K<n<10K"
    assert card.size_category(250_000) == "100K<n<1M"


def test_bad_manifests_are_one_line_errors(folder: Path) -> None:
    manifest = _manifest(folder)
    with pytest.raises(NeedlebenchError, match="no configs"):
        card.render_card({**manifest, "configs": {}})
    unknown = {**manifest, "configs": {"nonsense_config": manifest["configs"]["atc_en"]}}
    with pytest.raises(NeedlebenchError) as error:
        card.render_card(unknown)
    assert "nonsense_config" in str(error.value) and "\n" not in str(error.value)


def test_template_override(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\n# {{ example_config }} at {{ tag }}\n", encoding="utf-8")
    monkeypatch.setenv(card.TEMPLATE_ENV, str(template))
    assert card.render_card(_manifest(folder), version="3.0.0").endswith("# single_en_4k at v3.0.0\n")
    monkeypatch.setenv(card.TEMPLATE_ENV, str(tmp_path / "missing.md"))
    with pytest.raises(NeedlebenchError, match=r"missing\.md"):
        card.render_card(_manifest(folder))


def test_card_text_equals_huggingface_hub_rendering(folder: Path) -> None:
    """The card is rendered without importing huggingface_hub.repocard; the text is what DatasetCard gives."""
    from huggingface_hub import DatasetCard

    manifest = _manifest(folder)
    data = card.card_data(manifest, folder)
    context = card.template_context(manifest, repo_id="org/needlebench", version="1.2.0")
    template = card.template_path().read_text(encoding="utf-8")
    expected = str(DatasetCard.from_template(data, template_str=template, **context))
    assert card._card_from_template(data, template, **context) == expected
    assert (
        card.render_card(manifest, folder, repo_id="org/needlebench", version="1.2.0") == expected.rstrip("\n") + "\n"
    )
    crlf = template.replace("\n", "\r\n")  # a user's template with Windows line breaks
    assert card._card_from_template(data, crlf, **context) == str(
        DatasetCard.from_template(data, template_str=crlf, **context)
    )


def test_features_are_written_without_datasets_and_equal_its_own(folder: Path) -> None:
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo

    from needlebench.tasks.schema import (
        FAMILY_COLUMNS,
        arrow_schema,
        features_dict,
        features_yaml,
    )

    for family in FAMILY_COLUMNS:
        features = Features.from_arrow_schema(arrow_schema(family))
        assert features_dict(family) == features.to_dict() and features_yaml(family) == features._to_yaml_list()
    manifest = _manifest(folder)
    entry = manifest["configs"]["atc_en"]
    download, uncompressed = card._file_sizes(folder, entry["files"])
    splits = SplitDict()
    splits.add(SplitInfo(name="test", num_bytes=uncompressed, num_examples=int(entry["rows"])))
    info = DatasetInfo(features=features_for("atc"), splits=splits, download_size=download, dataset_size=uncompressed)
    assert card.dataset_info_entry("atc_en", entry, folder) == {"config_name": "atc_en", **info._to_yaml_dict()}
