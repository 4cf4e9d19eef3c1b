"""Dataset cards: the README.md of a needlebench dataset folder, rendered from ``dataset_cards/needlebench_card.md``.

The card's YAML front matter is built with :class:`huggingface_hub.DatasetCardData`: one ``configs`` entry per config
(``data_files`` of its ``test`` split), ``dataset_info`` with the explicit features of the config's family
(:func:`needlebench.tasks.schema.features_yaml`), licence, languages, task categories, size category and tags. The body
is the Jinja template filled from the folder's manifest (``needlebench.json``): what each task measures, how the data
was built (recipe, corpora, tokenizer, grid, release seed, generator version), a per-config table with fingerprints,
usage, citations and a changelog.

``load_dataset(FOLDER, CONFIG, split="test")`` reads a folder with this card offline.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from needlebench.dataset.experiment_card import experiments_markdown
from needlebench.errors import NeedlebenchError
from needlebench.resources import card_template
from needlebench.safe_fs import Folder, opened, write_file
from needlebench.tasks.families import FAMILIES
from needlebench.tasks.grid import EDITIONS, ConfigSpec, get_config, registry
from needlebench.tasks.schema import features_yaml

#: Environment variable naming another card template (a Jinja Markdown file like the default one).
TEMPLATE_ENV = "NEEDLEBENCH_CARD_TEMPLATE"

PRETTY_NAME = "NeedleBench and Counting-Stars (needlebench build)"
SPLIT = "test"
TASK_CATEGORIES = ["question-answering", "text-generation"]
BASE_TAGS = ["long-context", "needle-in-a-haystack", "retrieval", "reasoning", "benchmark", "synthetic", "needlebench"]
PLACEHOLDER_REPO = "ORG/NAME"

#: What each family measures (one paragraph each, shown in the card's Tasks section): the family objects' texts.
TASK_DESCRIPTIONS = {key: entry.card_text["v1"] for key, entry in FAMILIES.items()}
#: The card's name and label of each edition's task rows (v2 configs are listed apart from the v1 ones).
_EDITION_ROWS = {"v1": ("{family}", "{label}"), "v2": ("v2_{family}", "{label} v2")}

#: Size category thresholds of the Hub (upper bound exclusive, label).
_SIZE_CATEGORIES = (
    (1_000, "n<1K"),
    (10_000, "1K<n<10K"),
    (100_000, "10K<n<100K"),
    (1_000_000, "100K<n<1M"),
    (10_000_000, "1M<n<10M"),
    (100_000_000, "10M<n<100M"),
    (1_000_000_000, "100M<n<1B"),
    (10_000_000_000, "1B<n<10B"),
    (100_000_000_000, "10B<n<100B"),
    (1_000_000_000_000, "100B<n<1T"),
)

#: Corpus licence strings mapped to Hub licence ids; "public domain" adds no constraint.
_LICENSE_IDS = {
    "mit": "mit",
    "apache-2.0": "apache-2.0",
    "apache 2.0": "apache-2.0",
    "cc0-1.0": "cc0-1.0",
    "cc-by-4.0": "cc-by-4.0",
    "cc-by-sa-4.0": "cc-by-sa-4.0",
    "odc-by": "odc-by",
}
_PUBLIC_DOMAIN = "public domain"
#: Licence of the generated parts (prompts, needles, questions): the generator's licence.
GENERATOR_LICENSE = "apache-2.0"


def template_path() -> Path:
    """The card template: ``$NEEDLEBENCH_CARD_TEMPLATE`` if set, else ``dataset_cards/needlebench_card.md``.

    The default one is the repository's file, or its copy installed with the package (:mod:`needlebench.resources`).
    """
    override = os.environ.get(TEMPLATE_ENV)
    path = Path(override) if override else card_template()
    if not path.is_file():
        raise NeedlebenchError(
            f"card template {path} not found; set {TEMPLATE_ENV} to a Jinja Markdown template such as "
            "dataset_cards/needlebench_card.md of the needlebench repository"
        )
    return path


def data_files_pattern(config: str) -> str:
    """The card's ``data_files`` glob of a config's test split: exactly the files ``load_dataset`` reads for it."""
    return f"data/{config}/{SPLIT}-*.parquet"


def is_loaded_file(config: str, path: str) -> bool:
    """Whether the repository path ``path`` matches :func:`data_files_pattern` (``*`` never crosses a ``/``)."""
    pattern = PurePosixPath(data_files_pattern(config))
    candidate = PurePosixPath(path)
    return len(candidate.parts) == len(pattern.parts) and candidate.match(str(pattern))


def ordered_configs(names: Iterable[str]) -> list[str]:
    """Config names in registry order (the order of ``needlebench list``)."""
    order = {name: index for index, name in enumerate(registry())}
    return sorted(names, key=lambda name: (order.get(name, len(order)), name))


def size_category(rows: int) -> str:
    """The Hub size category of a row count."""
    for bound, label in _SIZE_CATEGORIES:
        if rows < bound:
            return label
    return "n>1T"


def card_license(corpora: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, str]]:
    """The card's licence id and extra YAML keys, from the corpora licences.

    Public-domain corpora leave the generator's licence; one distinct known licence is used as is; anything else
    gives ``other`` with ``license_name``/``license_details`` naming every corpus licence.
    """
    found: set[str] = set()
    unknown: list[str] = []
    for language, corpus in sorted(corpora.items()):
        text = str(corpus.get("license", "")).strip()
        lowered = text.lower()
        if lowered == _PUBLIC_DOMAIN:
            continue
        if lowered in _LICENSE_IDS:
            found.add(_LICENSE_IDS[lowered])
        else:
            unknown.append(f"{language}: {corpus.get('name', '?')} ({text or 'unknown'})")
    if not found and not unknown:
        return GENERATOR_LICENSE, {}
    if len(found) == 1 and not unknown:
        return next(iter(found)), {}
    details = "; ".join(unknown + sorted(found))
    return "other", {
        "license_name": "needlebench-mixed",
        "license_details": f"Generated parts {GENERATOR_LICENSE}; haystack corpora: {details}",
    }


def _file_sizes(folder: Path | Folder | None, files: Iterable[str]) -> tuple[int, int]:
    """(download bytes, uncompressed bytes) of a config's Parquet files; zeros when they are not on disk. Each file is
    opened once through the folder's descriptor as a regular file (never a link, FIFO or device) and measured on
    that descriptor."""
    if folder is None:
        return 0, 0
    import pyarrow.parquet as pq

    download = uncompressed = 0
    with opened(folder) as root:
        for name in files:
            try:
                handle = root.open_read(name, what=f" (listed by the card of {root.path})")
            except FileNotFoundError:
                return 0, 0
            with handle:
                download += os.fstat(handle.fileno()).st_size
                metadata = pq.ParquetFile(handle).metadata
            uncompressed += sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))
    return download, uncompressed


def dataset_info_entry(name: str, entry: Mapping[str, Any], folder: Path | None) -> dict[str, Any]:
    """The ``dataset_info`` YAML item of one config: features of its family and the test split size (what
    ``datasets.DatasetInfo._to_yaml_dict`` writes, built without importing `datasets`: a test checks both agree)."""

    download, uncompressed = _file_sizes(folder, entry.get("files", []))
    split = {"name": SPLIT, "num_bytes": uncompressed, "num_examples": int(entry["rows"])}
    entry_yaml: dict[str, Any] = {"features": features_yaml(get_config(name).schema_family), "splits": [split]}
    if download:
        entry_yaml.update(download_size=download, dataset_size=uncompressed)
    else:  # sizes unknown (files not in `folder`): record only the row count
        split.pop("num_bytes")
    return {"config_name": name, **entry_yaml}


def configs_entries(names: list[str]) -> list[dict[str, Any]]:
    """The ``configs`` YAML list: one test split per config; the first config is the default."""
    return [
        {
            "config_name": name,
            "data_files": [{"split": SPLIT, "path": data_files_pattern(name)}],
            **({"default": True} if index == 0 else {}),
        }
        for index, name in enumerate(names)
    ]


def card_data(manifest: Mapping[str, Any], folder: Path | None = None):
    """The card's YAML metadata as a :class:`huggingface_hub.DatasetCardData`."""
    from huggingface_hub import DatasetCardData

    names = ordered_configs(manifest["configs"])
    families = {get_config(name).family for name in names}
    corpora = manifest.get("recipe", {}).get("corpora") or {}
    license_id, license_extra = card_license(corpora)
    tags = BASE_TAGS + [tag for key, entry in FAMILIES.items() if key in families for tag in entry.card_tags]
    total_rows = sum(int(manifest["configs"][name]["rows"]) for name in names)
    languages = sorted({get_config(name).language for name in names})
    return DatasetCardData(
        language=languages,
        license=license_id,
        task_categories=list(TASK_CATEGORIES),
        size_categories=[size_category(total_rows)],
        pretty_name=PRETTY_NAME,
        tags=tags,
        configs=configs_entries(names),
        dataset_info=[dataset_info_entry(name, manifest["configs"][name], folder) for name in names],
        **license_extra,
    )


def _lengths_text(spec: ConfigSpec) -> str:
    lengths = spec.lengths
    if not lengths:
        return "n/a"
    if len(lengths) == 1:
        return f"{lengths[0]:,}"
    return f"{lengths[0]:,}–{lengths[-1]:,} ({len(lengths)})"


def _format_value(value: Any) -> str:
    """A recipe value for a Markdown table cell (None means the embedded default)."""
    if value is None:
        return "default"
    if isinstance(value, (list, tuple)):
        return ", ".join(_format_value(item) for item in value) or "none"
    if isinstance(value, Mapping) and {"file", "kind", "size", "sha256"} <= set(value):  # a local input, no path
        value = f"{value['file']} (local {value['kind']}, {int(value['size']):,} bytes, sha256 {value['sha256']})"
    return str(value).replace("|", "\\|")


def _corpus_rows(corpora: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    rows = []
    for language, corpus in sorted(corpora.items()):
        row = {key: _format_value(corpus.get(key, "")) or "—" for key in ("name", "source", "revision", "license")}
        rows.append({"language": language, **row, "sha256": str(corpus.get("sha256", ""))})
    return rows


def _config_rows(manifest: Mapping[str, Any], names: list[str]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        entry = manifest["configs"][name]
        spec = get_config(name)
        rows.append(
            {
                "name": name,
                "task": spec.task_label,
                "language": spec.language,
                "lengths": _lengths_text(spec),
                "rows": f"{int(entry['rows']):,}",
                "haystack_tokens": f"{int(entry.get('haystack_tokens', 0)):,}",
                "prompt_tokens": f"{int(entry.get('prompt_tokens', 0)):,}",
                "fingerprint": entry["fingerprint"],
            }
        )
    return rows


def _task_rows(names: list[str]) -> list[dict[str, Any]]:
    """One row per family and edition of the configs (v1 rows first), with the family's text for the edition."""
    counts: dict[tuple[str, str], int] = {}
    for name in names:
        spec = get_config(name)
        counts[spec.edition, spec.family] = counts.get((spec.edition, spec.family), 0) + 1
    return [
        {
            "family": _EDITION_ROWS[edition][0].format(family=key),
            "label": _EDITION_ROWS[edition][1].format(label=entry.label),
            "count": counts[edition, key],
            "description": entry.card_text[edition],
        }
        for edition in EDITIONS
        for key, entry in FAMILIES.items()
        if (edition, key) in counts
    ]


def default_changelog(manifest: Mapping[str, Any], version: str | None) -> list[dict[str, Any]]:
    """A one-entry changelog for a card without release history."""
    recipe = manifest.get("recipe", {})
    label = f"v{version}" if version else "unreleased build"
    changes = [
        f"generated by needlebench {manifest.get('generator_version', '?')} "
        f"with release seed {recipe.get('release_seed', '?')}",
        f"{len(manifest['configs'])} config{'s' if len(manifest['configs']) != 1 else ''}",
    ]
    return [{"version": label, "changes": changes}]


def template_context(
    manifest: Mapping[str, Any],
    *,
    repo_id: str | None = None,
    version: str | None = None,
    changelog: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Variables of the card template (besides ``card_data``)."""
    names = ordered_configs(manifest["configs"])
    recipe = dict(manifest.get("recipe", {}))
    corpora = recipe.pop("corpora", None) or {}
    entries = [manifest["configs"][name] for name in names]
    return {
        "pretty_name": PRETTY_NAME,
        "repo_id": repo_id,
        "load_path": repo_id or PLACEHOLDER_REPO,
        "version": version,
        "tag": f"v{version}" if version else None,
        "generator_version": manifest.get("generator_version", "?"),
        "manifest_format": manifest.get("format", "needlebench-dataset"),
        "format_version": manifest.get("format_version", 1),
        "release_seed": recipe.get("release_seed", "?"),
        "tokenizer": recipe.get("tokenizer", "cl100k_base"),
        "compat": recipe.get("compat") or "none (needlebench defaults)",
        "recipe_options": [(key, _format_value(value)) for key, value in sorted(recipe.items())],
        "corpora": _corpus_rows(corpora),
        "tasks": _task_rows(names),
        "v2": "v2" in {get_config(name).edition for name in names},
        "configs": _config_rows(manifest, names),
        "total_rows": f"{sum(int(e['rows']) for e in entries):,}",
        "total_haystack_tokens": f"{sum(int(e.get('haystack_tokens', 0)) for e in entries):,}",
        "total_prompt_tokens": f"{sum(int(e.get('prompt_tokens', 0)) for e in entries):,}",
        "example_config": names[0],
        "changelog": changelog if changelog is not None else default_changelog(manifest, version),
    }


def render_card(
    manifest: Mapping[str, Any],
    folder: Path | Folder | None = None,
    *,
    repo_id: str | None = None,
    version: str | None = None,
    changelog: list[dict[str, Any]] | None = None,
) -> str:
    """The card text (YAML front matter and Markdown body) of a manifest.

    ``folder`` (the dataset folder) lets the card record file sizes; ``repo_id`` and ``version`` fill the usage
    lines (a placeholder repo and no revision otherwise); ``changelog`` is a list of
    ``{"version": str, "changes": [str]}``, newest first.
    """
    if not manifest.get("configs"):
        raise NeedlebenchError("the manifest lists no configs; a dataset card needs at least one config")
    data = card_data(manifest, folder)
    context = template_context(manifest, repo_id=repo_id, version=version, changelog=changelog)
    template = Path(template_path()).read_text(encoding="utf-8")
    text = _card_from_template(data, template, **context)
    if text is None:
        from huggingface_hub import DatasetCard

        text = str(DatasetCard.from_template(data, template_str=template, **context))
    text = text.rstrip("\n") + "\n"
    if manifest.get("experiments"):
        text += experiments_markdown(manifest["experiments"])
    return text


#: The YAML block at the top of a card (``huggingface_hub.repocard.REGEX_YAML_BLOCK``).
_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")


def _card_from_template(data: Any, template: str, **context: Any) -> str | None:
    """``str(DatasetCard.from_template(data, template_str=template, **context))`` for a card with ``\\n`` line
    breaks (None otherwise), without importing ``huggingface_hub.repocard``, which pulls in the Hub client (about
    a second of a small build): render the template, then re-serialise its YAML block from the parsed card data,
    as ``RepoCard`` does. A test checks both give the same text."""
    import yaml
    from huggingface_hub.repocard_data import DatasetCardData

    kwargs = {**data.to_dict(), **context}
    content = _compiled(template).render(card_data=data.to_yaml(), **kwargs)
    match = _YAML_BLOCK.search(content)
    if "\r" in content or match is None:
        return None
    parsed = yaml.safe_load(match.group(2)) or {}
    if not isinstance(parsed, dict):
        return None
    block = DatasetCardData(**parsed).to_yaml(line_break="\n", original_order=list(parsed))
    return "---\n" + block + "\n---\n" + content[match.end() :]


@cache
def _compiled(template: str):
    import jinja2

    return jinja2.Template(template)


def warm_up() -> None:
    """Import what rendering a card needs and compile the card template (a tenth of a second), so that a build
    can do it while its workers run instead of after them."""
    import yaml  # noqa: F401
    from huggingface_hub.repocard_data import DatasetCardData  # noqa: F401

    _compiled(Path(template_path()).read_text(encoding="utf-8"))


def write_text_atomic(path: Path, text: str) -> None:
    """Write a text file (UTF-8, mode 0644) through a temporary file of :mod:`needlebench.safe_fs` in the same folder
    (an unpredictable name, ``O_EXCL | O_NOFOLLOW``) and an atomic rename by descriptors: a link planted at `path` or
    at any temporary name is replaced, never written through. The folder is opened as given (created if missing)."""
    write_file(path, text.encode("utf-8"), mode=0o644)


def write_card(
    out_dir: Path,
    manifest: Mapping[str, Any],
    *,
    repo_id: str | None = None,
    version: str | None = None,
    changelog: list[dict[str, Any]] | None = None,
) -> Path:
    """Render the card of ``manifest`` and write it to ``out_dir/README.md`` atomically; returns the path."""
    out_dir = Path(out_dir)
    text = render_card(manifest, out_dir, repo_id=repo_id, version=version, changelog=changelog)
    target = out_dir / "README.md"
    write_text_atomic(target, text)
    return target
