"""Publish a needlebench dataset folder as a versioned release: to the Hugging Face Hub or into a local git repo.

A release is a commit holding ``README.md`` (the card, re-rendered with the repo id, version and changelog),
``needlebench.json`` and the Parquet files listed in it, tagged ``vX.Y.Z``. Rules, the same for both targets:

* the folder must be a needlebench dataset whose files still match its manifest;
* the version must be semantic (``X.Y.Z``, optionally ``-PRERELEASE``; a leading ``v`` is accepted);
* an existing tag is never moved: if it already holds the same data (``needlebench.json`` and ``data/**``),
  publishing is a no-op; if it holds other data, it is a one-line error and nothing is changed;
* a new version must be newer than every release already tagged (``main``, what ``load_dataset`` reads without a
  revision, never goes back to older data); an older one is a one-line error and nothing is changed.

The changelog of the card lists every release up to this one, computed from the manifests of the earlier tags.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from needlebench.dataset.build import register_experiments
from needlebench.dataset.card import ordered_configs, render_card
from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.replace import recover_before_reading
from needlebench.dataset.safe_folder import FORMAT, MAX_MANIFEST_BYTES, check_targets, parse_json
from needlebench.dataset.verify import (
    MANIFEST_NAME,
    check_files,
    check_repo_id,
    file_difference,
)
from needlebench.errors import NeedlebenchError
from needlebench.markdown import md_escape
from needlebench.safe_fs import Folder
from needlebench.sources.hub import check_token, hub_error_message, hub_errors
from needlebench.terminal import printable

if TYPE_CHECKING:
    from huggingface_hub import HfApi

_SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?$"
)
CARD_NAME = "README.md"
#: Remote files replaced by every release (stale configs of earlier releases are removed).
HUB_DELETE_PATTERNS = ["data/**"]
#: Author, committer and tagger of git releases, fixed so the same inputs give the same commit ids.
GIT_IDENTITY = {"name": "needlebench", "email": "needlebench@users.noreply.huggingface.co"}
#: Commit date of git releases unless SOURCE_DATE_EPOCH is set (2024-07-11 00:00:00 UTC, the release seed's date).
DEFAULT_GIT_EPOCH = 1720656000
GIT_TIMEOUT = 300
#: Given to every git command: no hook (``githooks(5)``: a repository's ``hooks/`` run on commit, update-ref, tag)
#: and no file-system monitor (``core.fsmonitor``, a command git runs on ``status``), whatever the repository or the
#: user's configuration says. The user's global configuration is still read (it is theirs; the identity of a release
#: is fixed by :func:`git_environment` anyway), the repository's own is checked first (:func:`check_repo_config`).
#: Every other option that can make git run a program (``git-config(1)``) is set per invocation too (``-c`` wins over
#: every configuration file, so a ``.git/config`` swapped after :func:`check_repo_config` cannot set it): the pager,
#: the editor, ssh, the proxy, credential helpers, askpass, an external diff, gpg, and no transport at all
#: (``protocol.allow=never``). Filter, diff-driver and merge-driver programs (``filter.<driver>.clean``...) cannot be
#: blanked for every name; git runs one only for a path whose attributes name it (``gitattributes(5)``), and
#: needlebench reads no attributes: no system or user attributes file (``GIT_ATTR_NOSYSTEM``,
#: ``core.attributesFile``), and no git command it runs applies a path's attributes (``hash-object --no-filters``,
#: plumbing without ``--ext-diff``/``--textconv``, no checkout by git). ``include.path``/``includeIf`` cannot be
#: blanked either: a ``-c`` value only adds; what they include can set only what is listed here (overridden).
GIT_SAFETY = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.attributesFile=/dev/null",
    "-c", "core.pager=cat",
    "-c", "core.editor=true",
    "-c", "sequence.editor=true",
    "-c", "core.sshCommand=false",
    "-c", "core.gitProxy=",
    "-c", "core.askPass=",
    "-c", "credential.helper=",
    "-c", "diff.external=",
    "-c", "gpg.program=false",
    "-c", "protocol.allow=never",
    "-c", "uploadpack.packObjectsHook=",
    "-c", "core.alternateRefsCommand=",
    "-c", "core.commitGraph=false",
)  # fmt: skip
# (``core.commitGraph=false``: a planted ``objects/info/commit-graph`` names each commit's tree without git reading
# the commit object, ``gitformat-commit-graph(5)``; the commit objects themselves are what a clone receives.)
#: Keys a repository's own configuration (``.git/config``) may set: what ``git init``, ``git clone`` and
#: ``git lfs`` write there, none of which makes git run a command. Any other key (``core.fsmonitor``,
#: ``core.sshCommand``, ``core.pager``, ``filter.<name>.clean``, ``diff.external``, ``alias.*``, ``include.path``,
#: ``lfs.customtransfer.*``; ``git-config(1)``) refuses the repository before git reads it.
REPO_CONFIG_KEYS = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.logallrefupdates",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "init.defaultbranch",
        "user.name",
        "user.email",
        "lfs.repositoryformatversion",
    }
)
#: ``<section>.<subsection>.<key>`` allowed for any subsection (a remote's or a branch's name).
REPO_CONFIG_SUBSECTION_KEYS = frozenset({"remote.url", "remote.fetch", "branch.remote", "branch.merge"})
MAX_REPO_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class PublishResult:
    """Outcome of a publish: the commit the tag points at (``revision``), and whether this call created it."""

    repo: str
    revision: str
    tag: str
    created: bool
    how_to_load: str


# --- versions -------------------------------------------------------------------------------------------------


def parse_version(value: str) -> str:
    """Normalise a semantic version (``1.2.3``, ``v1.2.3``, ``1.2.3-rc.1``) to ``X.Y.Z[-PRE]``."""
    if not isinstance(value, str) or not _SEMVER.match(value.strip()):
        raise NeedlebenchError(
            f"version {value!r} is not a semantic version; allowed: X.Y.Z such as 1.0.0 "
            "(optionally -PRERELEASE, a leading 'v' is accepted)"
        )
    return value.strip().removeprefix("v")


def tag_for(version: str) -> str:
    return f"v{version}"


def version_key(version: str) -> tuple:
    """Sort key of a semantic version (pre-releases before their release)."""
    match = _SEMVER.match(version)
    if match is None:
        raise ValueError(version)
    major, minor, patch, pre = match.groups()
    if pre is None:
        return (int(major), int(minor), int(patch), 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (int(major), int(minor), int(patch), 0, parts)


def semver_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The release tags (``vX.Y.Z[-PRE]``) among ``tags``: version -> target."""
    return {name[1:]: target for name, target in tags.items() if name.startswith("v") and _SEMVER.match(name)}


def release_tags(tags: Mapping[str, str], below: str) -> list[tuple[str, str]]:
    """(version, target) of the semver tags lower than version ``below``, oldest first."""
    limit = version_key(below)
    found = [(version, target) for version, target in semver_tags(tags).items() if version_key(version) < limit]
    return sorted(found, key=lambda item: version_key(item[0]))


def check_not_older(version: str, tags: Mapping[str, str], where: str) -> None:
    """Refuse a new release older than the newest one tagged in ``where`` (it would move ``main`` backwards)."""
    newest = max(semver_tags(tags), key=version_key, default=None)
    if newest is not None and version_key(version) < version_key(newest):
        raise NeedlebenchError(
            f"version {version} is older than the newest release {tag_for(newest)} of {where}; publishing it would "
            f"move main back to older data, publish a version above {tag_for(newest)}"
        )


# --- folder, staging, digests ---------------------------------------------------------------------------------


def prepare_folder(folder: Path) -> dict[str, Any]:
    """The manifest of a publishable folder: a needlebench dataset whose files match its manifest."""

    folder = Path(folder)
    recover_before_reading(folder)  # a replace a killed build committed is finished first, as a build would
    manifest = read_manifest(folder)
    register_experiments(manifest)  # the card lists its experiment configs by name
    differences = check_files(folder, manifest, list(manifest["configs"]))
    if differences:
        name, reason = next(iter(differences.items()))
        raise NeedlebenchError(
            f"{folder} does not match its manifest (config {name}: {reason}); rebuild it with `needlebench build`"
        )
    return manifest


def content_files(manifest: Mapping[str, Any]) -> list[str]:
    """Repository paths of a release's data: the manifest and every listed Parquet file."""
    return [MANIFEST_NAME, *sorted(f for entry in manifest["configs"].values() for f in entry["files"])]


def checked_content_files(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """:func:`content_files`, each checked to be a regular file inside `folder` reached through no link
    (:mod:`needlebench.dataset.safe_folder`): a release never carries a file from outside the dataset."""

    names = content_files(manifest)
    check_targets(Path(folder), names, str(Path(folder) / MANIFEST_NAME))
    return names


def is_content_path(path: str) -> bool:
    """Paths compared when a tag exists: the manifest and everything under ``data/``."""
    return path == MANIFEST_NAME or PurePosixPath(path).parts[:1] == ("data",)


@contextmanager
def staged_content(folder: Path, manifest: Mapping[str, Any]) -> Iterator[Path]:
    """A private temporary copy of the manifest and the files it lists, checked there against the manifest: what is
    published or compared is exactly what was checked, whatever happens to the folder meanwhile.

    Each file is read once, through a descriptor opened without following a link (:meth:`Folder.open_read`), and
    written into a 0700 folder of ours: a copy, never a hard link, since a link shares the inode, so a second
    process rewriting the handed file in place after the check would change the staged bytes too. Nothing reads the
    handed folder again afterwards."""
    names = checked_content_files(folder, manifest)
    with tempfile.TemporaryDirectory(prefix="needlebench-publish-") as temp, Folder.open(temp) as holder:
        holder.mkdir("release", mode=0o700)
        with Folder.open(folder) as source, holder.sub("release") as staged:
            for name in names:
                with source.open_read(name) as reader, staged.atomic(name, mode=0o600, create_parents=True) as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
            for config, entry in manifest["configs"].items():
                reason = file_difference(staged, config, entry)
                if reason is not None:
                    raise NeedlebenchError(
                        f"{folder} changed while it was published (config {config}: {reason}); publish it again"
                    )
            staged_manifest = parse_json(staged.read_bytes(MANIFEST_NAME), Path(folder) / MANIFEST_NAME)
            if staged_manifest != manifest:
                raise NeedlebenchError(f"{Path(folder) / MANIFEST_NAME} changed while it was published; publish again")
        yield Path(temp) / "release"


@contextmanager
def staged_release(
    folder: Path,
    manifest: Mapping[str, Any],
    *,
    repo_id: str | None,
    version: str,
    changelog: list[dict[str, Any]],
) -> Iterator[Path]:
    """A private temporary copy of the release files (:func:`staged_content`), with the card re-rendered."""
    with staged_content(folder, manifest) as staged:
        card = render_card(manifest, staged, repo_id=repo_id, version=version, changelog=changelog)
        with Folder.open(staged) as target:
            target.write_text(CARD_NAME, card)
        yield staged


@dataclass(frozen=True)
class FileDigest:
    """Content ids of a local file: SHA-256 (LFS/Xet oid) and git blob SHA-1 (Hub ``blob_id``)."""

    sha256: str
    git_sha1: str


def file_digest(path: Path) -> FileDigest:
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            sha256.update(chunk)
            sha1.update(chunk)
    return FileDigest(sha256.hexdigest(), sha1.hexdigest())


def local_digests(folder: Path, manifest: Mapping[str, Any]) -> dict[str, FileDigest]:
    """Digests of the content files, read from a checked private copy (:func:`staged_content`)."""
    with staged_content(folder, manifest) as staged:
        return {name: file_digest(staged / name) for name in content_files(manifest)}


# --- changelog and messages -----------------------------------------------------------------------------------


#: A value of a manifest shown as it is in the changelog: a version or a config name (letters, digits, ``._+-``).
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def _shown(value: Any) -> str:
    """A manifest value (an earlier release's manifest may hold anything) for the card's changelog and the commit
    message: a plain version or name as it is, anything else as inert Markdown on one line (the report's escaping:
    no HTML, no link, no heading), at most 80 characters."""
    text = str(value)
    if _PLAIN_VALUE.fullmatch(text):
        return text
    text = text if len(text) <= 80 else text[:79] + "\u2026"
    return md_escape(text)


def _names(items: list[str], limit: int = 6) -> str:
    items = [_shown(item) for item in items]
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def manifest_changes(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """What a release changes relative to the previous one (configs added, removed, regenerated; recipe)."""
    configs = ordered_configs(current["configs"])
    if previous is None:
        return [f"{len(configs)} config{'s' if len(configs) != 1 else ''}: {_names(configs)}"]
    before = previous.get("configs", {})
    added = [name for name in configs if name not in before]
    removed = ordered_configs(name for name in before if name not in current["configs"])
    changed = [
        name
        for name in configs
        if name in before and before[name].get("fingerprint") != current["configs"][name]["fingerprint"]
    ]
    old_recipe, new_recipe = previous.get("recipe", {}), current.get("recipe", {})
    recipe_keys = sorted(
        key
        for key in set(old_recipe) | set(new_recipe)
        if key != "generator_version" and old_recipe.get(key) != new_recipe.get(key)
    )
    changes = []
    if previous.get("generator_version") != current.get("generator_version"):
        changes.append(
            f"generator {_shown(previous.get('generator_version', '?'))} -> "
            f"{_shown(current.get('generator_version', '?'))}"
        )
    if recipe_keys:
        changes.append(f"recipe changed: {', '.join(_shown(key) for key in recipe_keys)}")
    if added:
        changes.append(f"added {_names(added)}")
    if removed:
        changes.append(f"removed {_names(removed)}")
    if changed:
        changes.append(f"regenerated {_names(changed)}")
    return changes or ["no data changes"]


def build_changelog(history: list[tuple[str, Mapping[str, Any] | None]]) -> list[dict[str, Any]]:
    """Changelog entries, newest first, from ``(version, manifest or None)`` pairs, oldest first."""
    entries = []
    previous: Mapping[str, Any] | None = None
    for version, manifest in history:
        if manifest is None:
            changes = ["earlier release (see the card at that tag)"]
        else:
            changes = manifest_changes(previous, manifest)
            previous = manifest
        entries.append({"version": tag_for(version), "changes": changes})
    return entries[::-1]


def release_result(repo: str, revision: str, tag: str, created: bool, usage: str) -> PublishResult:
    """A :class:`PublishResult` whose ``how_to_load`` starts with the published revision."""
    if created:
        header = f"published {repo} {tag} at commit {revision}"
    else:
        header = f"{repo} {tag} already holds this data (commit {revision}); nothing to do"
    return PublishResult(repo, revision, tag, created, f"{header}\n{usage}")


def how_to_load_hub(repo_id: str, tag: str, manifest: Mapping[str, Any]) -> str:
    example = ordered_configs(manifest["configs"])[0]
    return (
        f"from datasets import load_dataset\n"
        f'ds = load_dataset("{repo_id}", "{example}", split="test", revision="{tag}")\n'
        f"# lm-eval task YAML: dataset_path: {repo_id}, dataset_name: {example}, "
        f"dataset_kwargs: {{revision: {tag}}}\n"
        f"# check it: needlebench verify --repo {repo_id} --revision {tag}"
    )


def how_to_load_git(git_path: Path, repo_id: str | None, tag: str, manifest: Mapping[str, Any]) -> str:
    example = ordered_configs(manifest["configs"])[0]
    if repo_id is None:
        return (
            f"# a Hub dataset repo: push it, then load revision {tag}\n"
            f"git -C {git_path} push https://huggingface.co/datasets/ORG/NAME main {tag}\n"
            f'ds = load_dataset("ORG/NAME", "{example}", split="test", revision="{tag}")'
        )
    lines = [f"# push it to the Hub: git -C {git_path} push https://huggingface.co/datasets/{repo_id} main {tag}"]
    if git_path.parts[-3:] == ("datasets", *repo_id.split("/")):
        lines.append(f"# or serve {git_path.parents[2]} with olah (mirrors-path) and point HF_ENDPOINT at it")
    return "\n".join(lines) + "\n" + how_to_load_hub(repo_id, tag, manifest)


# --- the Hub --------------------------------------------------------------------------------------------------


def _hub_tags(api: Any, repo_id: str, token: str | None) -> dict[str, str]:
    """Tags of a Hub dataset (name -> commit); empty when the repository does not exist yet."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        refs = api.list_repo_refs(repo_id, repo_type="dataset", token=token)
    except RepositoryNotFoundError:
        return {}
    return {ref.name: ref.target_commit for ref in refs.tags}


def _hub_tree(api: Any, repo_id: str, revision: str, token: str | None) -> dict[str, Any]:
    """Content files (manifest, data/**) of a Hub dataset at a revision, by path."""
    entries = api.list_repo_tree(repo_id, recursive=True, revision=revision, repo_type="dataset", token=token)
    return {entry.path: entry for entry in entries if hasattr(entry, "blob_id") and is_content_path(entry.path)}


def same_hub_content(remote: Mapping[str, Any], local: Mapping[str, FileDigest]) -> bool:
    """Whether remote files (``RepoFile``) hold exactly the local content files."""
    if set(remote) != set(local):
        return False
    for path, entry in remote.items():
        lfs = getattr(entry, "lfs", None)
        if lfs is not None:
            if lfs.sha256 != local[path].sha256:
                return False
        elif entry.blob_id != local[path].git_sha1:
            return False
    return True


def _hub_manifest(api: Any, repo_id: str, revision: str, token: str | None) -> dict[str, Any] | None:
    """The manifest of an earlier Hub release, or None when it cannot be read."""

    try:
        path = api.hf_hub_download(repo_id, MANIFEST_NAME, repo_type="dataset", revision=revision, token=token)
        with open(path, "rb") as handle:  # the user's own Hugging Face cache
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except (*hub_errors(), OSError):
        return None
    return earlier_manifest(data, f"{MANIFEST_NAME} of {repo_id}@{revision}")


def earlier_manifest(data: bytes | None, where: str) -> dict[str, Any] | None:
    """The manifest of an earlier release (parsed with limits, checked field by field), or None when it is not
    one: the changelog then says "earlier release" for it."""
    if not data or len(data) > MAX_MANIFEST_BYTES:
        return None
    try:
        manifest = parse_json(data, Path(where))
    except NeedlebenchError:
        return None
    # what manifest_changes reads: configs of objects, a recipe object, a version string (an older release's
    # manifest may hold fields this version does not know: they are not checked)
    if (
        not isinstance(manifest, dict)
        or not isinstance(manifest.get("configs"), dict)
        or not all(isinstance(entry, dict) for entry in manifest["configs"].values())
        or not isinstance(manifest.get("recipe", {}), dict)
        or not isinstance(manifest.get("generator_version", ""), str)
    ):
        return None
    return manifest


def _publish_hub(
    api: Any, folder: Path, manifest: dict[str, Any], *, repo_id: str, version: str, private: bool, token: str | None
) -> PublishResult:
    tag = tag_for(version)
    tags = _hub_tags(api, repo_id, token)
    if tag in tags:
        if same_hub_content(_hub_tree(api, repo_id, tags[tag], token), local_digests(folder, manifest)):
            return release_result(repo_id, tags[tag], tag, False, how_to_load_hub(repo_id, tag, manifest))
        raise NeedlebenchError(
            f"tag {tag} of {repo_id} already holds different data; tags are never moved, publish a new version"
        )
    check_not_older(version, tags, repo_id)
    history = [(v, _hub_manifest(api, repo_id, target, token)) for v, target in release_tags(tags, version)]
    changelog = build_changelog([*history, (version, manifest)])
    with staged_release(folder, manifest, repo_id=repo_id, version=version, changelog=changelog) as staged:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True, token=token)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=staged,
            repo_type="dataset",
            commit_message=f"Release {tag}",
            commit_description="; ".join(changelog[0]["changes"]),
            delete_patterns=HUB_DELETE_PATTERNS,
            token=token,
        )
    api.create_tag(
        repo_id,
        tag=tag,
        revision=commit.oid,
        tag_message=f"needlebench release {tag}",
        repo_type="dataset",
        token=token,
    )
    return release_result(repo_id, commit.oid, tag, True, how_to_load_hub(repo_id, tag, manifest))


def publish_folder(
    folder: Path,
    *,
    repo_id: str,
    version: str,
    private: bool = False,
    token: str | None = None,
    api: HfApi | None = None,
) -> PublishResult:
    """Publish a dataset folder to the Hub dataset ``repo_id`` and tag it ``v<version>``.

    Creates the repository if needed (``private`` applies then), uploads the release files in one commit (stale
    ``data/**`` files of earlier releases are removed), and tags that commit. ``api`` defaults to
    ``HfApi(token=token)``.
    """

    check_repo_id(repo_id)
    check_token(token)
    version = parse_version(version)
    manifest = prepare_folder(folder)
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    try:
        return _publish_hub(api, Path(folder), manifest, repo_id=repo_id, version=version, private=private, token=token)
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, f"publishing {repo_id} {tag_for(version)}")) from None


# --- local git repositories -----------------------------------------------------------------------------------


def git_environment(index_file: Path | None = None) -> dict[str, str]:
    """Environment of git calls: fixed identity and dates, no prompts, and none of the user's ``GIT_*`` variables
    (``git(1)``, ENVIRONMENT VARIABLES): ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE``, ``GIT_OBJECT_DIRECTORY``,
    ``GIT_ALTERNATE_OBJECT_DIRECTORIES``, ``GIT_CONFIG*``, ``GIT_NAMESPACE``... would point git at another repository,
    object store or configuration than the one checked. ``GIT_EXEC_PATH`` (where the user's git keeps its helpers)
    is kept."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", str(DEFAULT_GIT_EPOCH))
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_") or key in GIT_KEPT_ENV}
    env.update(
        GIT_AUTHOR_NAME=GIT_IDENTITY["name"],
        GIT_AUTHOR_EMAIL=GIT_IDENTITY["email"],
        GIT_COMMITTER_NAME=GIT_IDENTITY["name"],
        GIT_COMMITTER_EMAIL=GIT_IDENTITY["email"],
        GIT_AUTHOR_DATE=f"{epoch} +0000",
        GIT_COMMITTER_DATE=f"{epoch} +0000",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_ATTR_NOSYSTEM="1",  # no system gitattributes (gitattributes(5)): no attribute names a filter driver
        GIT_CEILING_DIRECTORIES="/",  # no discovery anywhere (every call names its repository anyway)
        # what needlebench reads is what a push or clone sends: no ``refs/replace/`` object standing in for another
        # (``git-replace(1)``), no ``info/grafts`` rewriting a commit's parents (``gitrepository-layout(5)``)
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_GRAFT_FILE=os.devnull,
    )
    if index_file is not None:
        env["GIT_INDEX_FILE"] = str(index_file)
    return env


#: ``GIT_*`` variables of the user's environment given to git: where its own helper programs are.
GIT_KEPT_ENV = frozenset({"GIT_EXEC_PATH"})


def _pinned_cwd(fd: int) -> dict[str, Any]:
    """``subprocess`` arguments that start the child in the directory open as ``fd``, never looked up by path again.

    On Linux ``/proc/self/fd/N`` is a "magic link" (``proc(5)``): ``chdir`` through it reaches the open file itself,
    whatever is renamed or linked at its path meanwhile. CPython's child calls ``chdir(cwd)`` after ``fork`` and
    before ``exec`` (``Modules/_posixsubprocess.c``, ``child_exec``), so ``self`` is the child, which still holds
    ``fd`` (close-on-exec closes it only at ``exec``: git never inherits it). Elsewhere, ``os.fchdir`` in the child."""
    proc = f"/proc/self/fd/{fd}"
    try:
        same = os.path.samestat(os.stat(proc), os.fstat(fd))
    except OSError:
        same = False
    if same:
        return {"cwd": proc}
    return {"preexec_fn": lambda: os.fchdir(fd)}


class GitRepo:
    """A git repository driven through the git CLI (argument lists, never a shell), always the one open as ``root``.

    Every git command starts in ``root``'s descriptor (:func:`_pinned_cwd`), never in a path looked up again (``git
    -C PATH`` would follow whatever is renamed or linked at PATH after the checks), and names its repository
    explicitly: ``--git-dir=.git --work-tree=.``, or ``--git-dir=.`` for a bare repository, so git never discovers
    another one (a bare repository beside an invalid ``.git``, a parent's repository; ``git(1)``, ``--git-dir``)."""

    def __init__(self, path: Path, root: Folder, bare: bool = False) -> None:
        self.path = Path(path)
        self.root = root
        self.bare = bare

    def run(self, *args: str, stdin: str | None = None, index_file: Path | None = None, check: bool = True) -> str:
        """git's output as text: bytes that are not UTF-8 (a file name, a file's content) kept as lone surrogates
        (``surrogateescape``, as ``os.fsdecode``), so a path read from git names the same file again."""
        data = None if stdin is None else stdin.encode("utf-8", "surrogateescape")
        out = self.run_bytes(*args, stdin=data, index_file=index_file, check=check)
        return out.decode("utf-8", "surrogateescape")

    def blob(self, oid: str) -> bytes:
        """The bytes the object database holds under ``oid`` (``git cat-file blob``), as a clone would receive them."""
        return self.run_bytes("cat-file", "blob", oid)

    def run_bytes(
        self, *args: str, stdin: bytes | None = None, index_file: Path | None = None, check: bool = True
    ) -> bytes:
        env = git_environment(index_file)
        command = [
            "git",
            "-c", "commit.gpgSign=false",
            "-c", "tag.gpgSign=false",
            "-c", "tag.forceSignAnnotated=false",
            "-c", "core.autocrlf=false",
            *GIT_SAFETY,
            *(["--git-dir=."] if self.bare else ["--git-dir=.git", "--work-tree=."]),
            *args,
        ]  # fmt: skip
        try:
            completed = subprocess.run(
                command,
                input=stdin,
                capture_output=True,
                env=env,
                timeout=GIT_TIMEOUT,
                check=False,
                **_pinned_cwd(self.root.fd),
            )
        except FileNotFoundError:
            raise NeedlebenchError(
                "git is not installed; publishing into a git repository needs the git command"
            ) from None
        except subprocess.TimeoutExpired:
            raise NeedlebenchError(f"git {args[0]} in {self.path} did not finish within {GIT_TIMEOUT} s") from None
        if check and completed.returncode != 0:
            message = printable(" ".join(completed.stderr.decode("utf-8", "replace").split())[:200])
            raise NeedlebenchError(f"git {args[0]} failed in {self.path}: {message}")
        return completed.stdout

    def resolve(self, ref: str) -> str | None:
        """The commit id of a ref, or None when it does not exist."""
        out = self.run("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False).strip()
        return out or None

    def tags(self) -> dict[str, str]:
        out = self.run("for-each-ref", "--format=%(refname:strip=2)%00%(*objectname)%00%(objectname)", "refs/tags")
        tags = {}
        for line in out.splitlines():
            name, peeled, target = line.split("\0")
            tags[name] = peeled or target
        return tags

    def tree_entries(self, commit: str) -> dict[str, str]:
        """``"<mode> <object id>"`` of every file (and submodule) of a commit, by path."""
        out = self.run("ls-tree", "-r", "-z", "--full-tree", commit)
        entries = {}
        for record in filter(None, out.split("\0")):
            meta, path = record.split("\t", 1)
            mode, _kind, oid = meta.split()
            entries[path] = f"{mode} {oid}"
        return entries

    def hash_files(self, folder: Path, paths: list[str], *, write: bool) -> dict[str, str]:
        """Blob ids of files (raw bytes, no filters); ``write`` stores them in the object database."""
        args = ["hash-object", "--no-filters", "--stdin-paths"] + (["-w"] if write else [])
        root = Path(folder).absolute()  # git runs in the repository: a relative folder would resolve there
        out = self.run(*args, stdin="".join(f"{root / p}\n" for p in paths))
        return dict(zip(paths, out.split(), strict=True))

    def show_file(self, revision: str, path: str) -> bytes | None:
        """The bytes of a file of a commit (``cat-file blob``: never a textconv or filter), or None."""
        return self.run_bytes("cat-file", "blob", f"{revision}:{path}", check=False) or None


def _remove_new_repo(git_path: Path, made_dir: bool, root: Folder) -> None:
    """Undo :func:`_open_git_repo`'s creation: the folder if it made it, else only the ``.git`` it initialised (in the
    folder open as ``root``)."""
    with contextlib.suppress(OSError, NeedlebenchError):
        if made_dir:
            with Folder.open(git_path.parent) as parent:  # by descriptors: a link put there is removed, not followed
                info = parent.lstat(git_path.name)
                if info is not None and os.path.samestat(info, os.fstat(root.fd)):
                    parent.rmtree(git_path.name)
        else:
            root.rmtree(".git")


def _repo_config_allowed(key: str) -> bool:
    if key.lower() in REPO_CONFIG_KEYS:
        return True
    section, _, rest = key.partition(".")
    _subsection, dot, name = rest.rpartition(".")
    return bool(dot) and f"{section.lower()}.{name.lower()}" in REPO_CONFIG_SUBSECTION_KEYS


#: Parts of a git folder git writes into by path when it commits and tags (gitrepository-layout(5)): a link there,
#: or a file with another name elsewhere (a hard link), would take git's write (a reflog line, a ref) outside.
GIT_WRITTEN = ("HEAD", "ORIG_HEAD", "FETCH_HEAD", "index", "packed-refs", "logs", "refs", "info", "objects")


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is the user's own private group (named as the user, no other member: the ``umask 002``
    convention of Debian and Fedora, under which git's folders are group-writable)."""
    try:
        import grp
        import pwd

        group = grp.getgrgid(gid)
        return gid == os.getegid() and not group.gr_mem and group.gr_name == pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return False


def _check_owned(folder: Folder) -> None:
    """Refuse a folder of the git folder that another user owns or can write into (``chmod(2)``: group/other write
    bits): they could put a link there (``objects/XX``) between this check and git's write, which follows it."""
    info = os.fstat(folder.fd)
    if info.st_uid != os.geteuid():
        raise NeedlebenchError(
            f"{printable(str(folder.path))} belongs to another user (uid {info.st_uid}): they could change it while "
            "git writes; needlebench publishes only into a repository of your own (give a new or empty folder)"
        )
    if info.st_mode & 0o002 or (info.st_mode & 0o020 and not _private_group(info.st_gid)):
        raise NeedlebenchError(
            f"{printable(str(folder.path))} is writable by others (mode {stat.S_IMODE(info.st_mode):o}): another user "
            "could change it while git writes; remove the group/other write bits (chmod -R go-w) or give a new or "
            "empty folder"
        )


def _check_git_files(git_dir: Folder, *, owned: bool = True) -> None:
    """Refuse a git folder holding a symbolic link anywhere in the parts git writes (:data:`GIT_WRITTEN`), or a file
    there with more than one name outside ``objects/`` (a local clone hard-links its objects, which git never
    writes into): walked by descriptors, without following links. With ``owned`` (an existing repository), every
    folder walked must be the user's and not writable by others (:func:`_check_owned`)."""
    if owned:
        _check_owned(git_dir)
    pending: list[tuple[Folder, str, bool]] = []
    for name in GIT_WRITTEN:
        info = git_dir.lstat(name)
        if info is None:
            continue
        if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
            raise _git_link(git_dir.path / name)
        if stat.S_ISDIR(info.st_mode):
            pending.append((git_dir.sub(name), name, name == "objects"))
    for name in git_dir.listdir():  # shallow, config, commondir...: git opens them all by path
        _refuse_special(git_dir, name)
    try:
        while pending:
            folder, relative, objects = pending.pop()
            with folder:
                if owned:
                    _check_owned(folder)
                for entry in folder.listdir():
                    info = folder.lstat(entry)
                    if info is None:
                        continue
                    _refuse_special(folder, entry)
                    if stat.S_ISLNK(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink > 1 and not objects):
                        raise _git_link(folder.path / entry)
                    if stat.S_ISDIR(info.st_mode):
                        if relative.count("/") > 32:
                            raise NeedlebenchError(f"{folder.path / entry} is nested too deeply for a git folder")
                        pending.append((folder.sub(entry), f"{relative}/{entry}", objects))
    finally:
        for folder, _, _ in pending:
            folder.close()


def _refuse_special(folder: Folder, name: str) -> None:
    """Refuse a FIFO, socket or device in a git folder: git opens ``info/grafts``, ``shallow``, ``packed-refs``,
    ``objects/info/alternates`` by path and would block on a FIFO (``fifo(7)``), paced by whoever writes to it."""
    info = folder.lstat(name)
    if info is not None and not (
        stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)
    ):
        raise NeedlebenchError(
            f"{printable(str(folder.path / name))} is not a regular file or a folder (a FIFO, socket or device); git "
            "would block or read another process's data from it, so needlebench publishes only into a git folder "
            "of files and folders (give a new or empty folder)"
        )


def _git_link(path: Path) -> NeedlebenchError:
    return NeedlebenchError(
        f"{path} is a symbolic link or a hard link; git would write through it (a reflog line, a ref) outside the "
        "repository, so needlebench publishes only into a git folder without links (give a new or empty folder)"
    )


#: What makes a folder a git folder for git itself (``is_git_directory`` in git's ``setup.c``;
#: ``gitrepository-layout(5)``): a ``HEAD`` file, an ``objects`` and a ``refs`` folder.
GIT_DIR_MARKS = ("HEAD", "objects", "refs")


def _git_dir_marks(folder: Folder) -> list[str]:
    """Which of :data:`GIT_DIR_MARKS` `folder` holds (``HEAD`` a file, the others folders; read without following a
    link)."""
    found = []
    for name in GIT_DIR_MARKS:
        info = folder.lstat(name)
        want = stat.S_ISREG if name == "HEAD" else stat.S_ISDIR
        if info is not None and want(info.st_mode):
            found.append(name)
    return found


def check_repo_config(root: Folder, *, created: bool = False) -> bool:
    """Refuse, before any git command runs in it, a repository whose own configuration could make git run a command
    or read configuration from elsewhere: its ``config`` (read without following a link) may set only the keys of
    :data:`REPO_CONFIG_KEYS` and :data:`REPO_CONFIG_SUBSECTION_KEYS`; a ``.git`` that is a file or a link (a linked
    work tree, a submodule: the configuration lives elsewhere) and a ``commondir`` are refused too
    (``gitrepository-layout(5)``). The repository is exactly the folder checked: a ``.git`` folder that git would
    not take as a repository (no ``HEAD``, ``objects`` or ``refs``: git would look elsewhere) and a folder holding
    a bare repository's ``HEAD``/``objects``/``refs`` beside its ``.git`` are refused, and so is a bare repository
    whose configuration does not say ``core.bare = true`` (git would take the repository folder as a work tree).
    Returns whether the repository is bare (no ``.git``: the folder is the git folder)."""
    where = root.path
    info = root.lstat(".git")
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise NeedlebenchError(
            f"{where}/.git is not a folder (a link, or a file pointing at another git folder); give a repository "
            "that holds its own .git folder, or a new or empty folder"
        )
    bare = info is None
    beside = _git_dir_marks(root)
    if not bare and beside:
        raise NeedlebenchError(
            f"{where} holds both a .git folder and a bare repository's {'/'.join(beside)}; git could take either, "
            "so needlebench publishes only into a folder that is one repository (give a new or empty folder)"
        )
    with root.sub(".git") if not bare else contextlib.nullcontext(root) as git_dir:
        if git_dir.lstat("commondir") is not None:
            raise NeedlebenchError(
                f"{git_dir.path} is a linked work tree (it has a commondir file); give the main repository's folder"
            )
        _check_git_files(git_dir, owned=not created)  # a repository git init just made: the user's umask decides
        try:
            data = git_dir.read_bytes("config", limit=MAX_REPO_CONFIG_BYTES, what=" (the repository's configuration)")
        except (FileNotFoundError, NotADirectoryError):
            raise NeedlebenchError(
                f"{where} is not a git repository (no {git_dir.path / 'config'}); give a git repository or a new or "
                "empty folder"
            ) from None
        missing = [name for name in GIT_DIR_MARKS if name not in _git_dir_marks(git_dir)]
        if missing:
            raise NeedlebenchError(
                f"{where} is not a git repository ({git_dir.path} has no {'/'.join(missing)}, so git would not take "
                "it as one); give a git repository or a new or empty folder"
            )
    try:
        completed = subprocess.run(
            ["git", *GIT_SAFETY, "config", "--file", "-", "--no-includes", "--list", "-z"],
            input=data,
            capture_output=True,
            env=git_environment(),
            cwd="/",
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise NeedlebenchError("git is not installed; publishing into a git repository needs the git command") from None
    if completed.returncode != 0:
        message = " ".join(completed.stderr.decode("utf-8", "replace").split())[:200]
        raise NeedlebenchError(f"{git_dir.path / 'config'} cannot be read as a git configuration: {message}")
    values: dict[str, str] = {}
    for record in filter(None, completed.stdout.split(b"\0")):
        key, _, value = record.decode("utf-8", "replace").partition("\n")
        if not _repo_config_allowed(key):
            raise NeedlebenchError(
                f"{git_dir.path / 'config'} sets {printable(key)!r}, which can make git run a command or read other "
                "configuration; needlebench publishes only into a repository whose own configuration sets nothing "
                "but remotes, branches, user.name/email and what git init writes (remove the key or give a new or "
                "empty folder)"
            )
        values[key.lower()] = value
    if bare and values.get("core.bare", "").lower() not in ("true", "yes", "on", "1"):
        raise NeedlebenchError(
            f"{git_dir.path / 'config'} is a bare repository's configuration without core.bare = true (git would "
            "write a work tree into the repository folder); give a bare repository, a repository with a .git folder "
            "or a new or empty folder"
        )
    return bare


def _open_git_repo(git_path: Path) -> tuple[GitRepo, bool | None]:
    """The repository at ``git_path``, initialised when absent or empty, open as a descriptor the caller closes
    (``repo.root``).

    The folder is opened without following a link planted on the way (:meth:`Folder.open`), and an existing
    repository is checked (:func:`check_repo_config`) before any git command runs in it; a repository this call
    initialises is checked the same way right after ``git init`` (which names its files by absolute paths). Every
    git command then runs in that descriptor (:class:`GitRepo`). Returns (repo, created): None for an existing
    repository, else whether the folder itself was made.
    """
    try:
        root = Folder.open(git_path)
        made_dir = False
    except FileNotFoundError:
        root = Folder.open(git_path, create=True)
        made_dir = True
    except NeedlebenchError as error:
        if " is not a folder (" in str(error):
            raise NeedlebenchError(
                f"git repository path {git_path} is a file; give a git repository folder or a new path"
            ) from None
        raise
    try:
        if made_dir or not root.listdir():
            repo = GitRepo(git_path, root)
            try:
                _init_repo(root)
                check_repo_config(root, created=True)
            except NeedlebenchError:
                _remove_new_repo(git_path, made_dir, root)
                raise
            return repo, made_dir
        repo = GitRepo(git_path, root, check_repo_config(root))
        bare = repo.run("rev-parse", "--is-bare-repository", check=False).strip()
        if bare != str(repo.bare).lower():
            raise NeedlebenchError(
                f"{git_path} is not a git repository; give a git repository or a new or empty folder"
            )
        check_release_repo(repo)
        return repo, None
    except BaseException:
        root.close()
        raise


def _init_repo(root: Folder) -> None:
    """``git init -b main`` in the open folder ``root``: run in a private temporary folder (``git init`` names every
    file it writes by its absolute path, looked up again by name), its ``.git`` then copied into ``root`` through
    descriptors (folders and files with git's modes, never through a link)."""
    with tempfile.TemporaryDirectory(prefix="needlebench-git-") as temp:
        made = Path(temp) / "repo"
        completed = subprocess.run(
            ["git", *GIT_SAFETY, "init", "-q", "-b", "main", str(made)],
            capture_output=True,
            text=True,
            env=git_environment(),
            cwd=temp,
            timeout=GIT_TIMEOUT,
            check=False,
        )
        if completed.returncode != 0:
            message = " ".join(completed.stderr.split())[:200]
            raise NeedlebenchError(f"git init failed for {root.path}: {message}")
        source = made / ".git"
        try:
            root.mkdir(".git", exist_ok=False)
            for directory, folders, files in os.walk(source):
                here = Path(directory).relative_to(source)
                for name in sorted(folders):
                    root.mkdir(
                        str(PurePosixPath(".git", here, name)),
                        mode=stat.S_IMODE(os.lstat(Path(directory, name)).st_mode),
                    )
                for name in sorted(files):
                    mode = stat.S_IMODE(os.lstat(Path(directory, name)).st_mode)
                    with open(Path(directory, name), "rb") as reader:  # our private folder
                        root.write_bytes(str(PurePosixPath(".git", here, name)), reader.read(), mode=mode)
        except OSError as error:
            raise NeedlebenchError(f"cannot create {root.path / '.git'}: {error.strerror or error}") from None


#: Files a fresh Hub dataset repository holds before its first release.
_FRESH_REPO_FILES = {".gitattributes"}


def check_release_repo(repo: GitRepo) -> None:
    """Refuse an existing repository that is not a needlebench release repository before anything changes: a
    release replaces the branch's ``README.md``, ``needlebench.json`` and ``data/**`` (in the work tree too), so the
    branch must hold no commit yet, only a fresh Hub repository's ``.gitattributes``, or a needlebench manifest
    (``needlebench.json`` of format ``needlebench-dataset``, which every release writes)."""
    head = repo.resolve("HEAD")
    if head is None:
        return
    if not repo.bare and _uncommitted(repo, head) is not None:
        return  # refused by _publish_git as "uncommitted changes" before anything changes
    paths = set(repo.tree_entries(head))
    if paths <= _FRESH_REPO_FILES:
        return
    if MANIFEST_NAME in paths:
        data = repo.show_file(head, MANIFEST_NAME) or b""
        try:
            manifest = parse_json(data, repo.path / MANIFEST_NAME)
        except NeedlebenchError:
            manifest = None
        if isinstance(manifest, dict) and manifest.get("format") == FORMAT:
            return
    example = sorted(paths - _FRESH_REPO_FILES)[0]
    raise NeedlebenchError(
        f"{repo.path} is not a needlebench release repository (its branch holds {example!r} and no needlebench "
        "manifest); a release replaces README.md and data/ there, so give a new or empty folder or a repository "
        "needlebench published into"
    )


def _branch(repo: GitRepo) -> str:
    ref = repo.run("symbolic-ref", "-q", "HEAD", check=False).strip()
    if not ref.startswith("refs/heads/"):
        raise NeedlebenchError(f"HEAD of {repo.path} is detached; check out a branch (e.g. main) first")
    return ref


def _git_history(repo: GitRepo, tags: dict[str, str], version: str) -> list[tuple[str, dict[str, Any] | None]]:
    history = []
    for earlier, commit in release_tags(tags, version):
        data = repo.show_file(commit, MANIFEST_NAME)
        history.append((earlier, earlier_manifest(data, f"{MANIFEST_NAME}@{commit}")))
    return history


def _prepare_objects(repo: GitRepo) -> None:
    """Make sure each of the 256 ``objects/XX`` folders git writes loose objects into (``gitrepository-layout(5)``)
    is a folder of the repository before git writes: missing ones are made through the git folder's descriptor, a
    link or a file there is refused (git opens ``objects/XX/...`` by path and would follow a link). Nobody else can
    change them afterwards: the folders are the user's and not writable by others (:func:`_check_owned`)."""
    with _git_dir(repo) as git_dir, git_dir.sub("objects") as objects:
        for index in range(256):
            name = f"{index:02x}"
            info = objects.lstat(name)
            if info is None:
                objects.mkdir(name)
            elif not stat.S_ISDIR(info.st_mode):
                raise _git_link(objects.path / name)


def _release_entries(
    repo: GitRepo, staged: Path, files: list[str], parent: str | None, *, write: bool
) -> dict[str, str]:
    """``"<mode> <object id>"`` by path of the tree a release on top of ``parent`` holds: the parent's files other
    than the card, the manifest and ``data/**``, and the staged ``files``. A kept path holding a control character
    is refused: needlebench's own records are NUL-separated, but a newline in a path makes one entry two for any
    line-based reader of the tree (``git ls-tree`` without ``-z``, a log line, a terminal)."""
    kept = {} if parent is None else repo.tree_entries(parent)
    entries = {path: meta for path, meta in kept.items() if not is_content_path(path) and path != CARD_NAME}
    for path in entries:
        if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
            raise NeedlebenchError(
                f"{repo.path} holds a file whose path has a control character ({printable(path)}); a release keeps "
                "the branch's other files, so rename or remove it first"
            )
    blobs = repo.hash_files(staged, files, write=write)
    entries.update({path: f"100644 {oid}" for path, oid in blobs.items()})
    return entries


def _commit_release(repo: GitRepo, staged: Path, files: list[str], parent: str | None, message: str) -> str:
    """Commit the staged release on top of ``parent`` (keeping the parent's other files); returns the commit."""
    entries = _release_entries(repo, staged, files, parent, write=True)
    with tempfile.TemporaryDirectory(prefix="needlebench-git-") as temp:
        index = Path(temp) / "index"
        # NUL-terminated records (``git-update-index(1)``, ``-z``): a path is never read as more than one record
        records = "".join(f"{meta}\t{path}\0" for path, meta in sorted(entries.items()))
        repo.run("update-index", "-z", "--index-info", stdin=records, index_file=index)
        tree = repo.run("write-tree", index_file=index).strip()
    if parent is not None and repo.run("rev-parse", f"{parent}^{{tree}}").strip() == tree:
        commit = parent  # nothing changed since the last commit: tag it, no empty commit
    else:
        commit = repo.run("commit-tree", tree, *(["-p", parent] if parent else []), "-m", message).strip()
    _check_release(
        repo,
        commit,
        staged,
        files,
        entries,
        f"the release commit git wrote in {repo.path} does not hold what was staged",
        "an object of the repository is corrupt or was planted",
    )
    return commit


def _check_release(
    repo: GitRepo, commit: str, staged: Path, files: list[str], entries: Mapping[str, str], what: str, why: str
) -> None:
    """The tree of ``commit`` holds exactly ``entries`` (one line, ``what (first difference: PATH); why``, otherwise)
    and each vouched blob holds the staged bytes (:func:`_check_blobs`)."""
    difference = _tree_difference(repo, commit, entries)
    if difference is not None:
        raise NeedlebenchError(f"{what} (first difference: {printable(difference)}); {why}")
    _check_blobs(repo, staged, files, entries)


def _tree_difference(repo: GitRepo, commit: str, entries: Mapping[str, str]) -> str | None:
    """The first path (in sorted order) where the tree of ``commit``, as the object database holds it, differs from
    ``entries``, or None when it holds exactly them (every path, mode and object id, nothing else)."""
    actual = repo.tree_entries(commit)
    for path in sorted(set(actual) | set(entries)):
        if actual.get(path) != entries.get(path):
            return path
    return None


def _check_blobs(repo: GitRepo, staged: Path, files: list[str], entries: Mapping[str, str]) -> None:
    """Read back each blob a release vouches for and compare its bytes with the staged file: git trusts an object it
    already has under an id (``hash-object -w`` writes nothing then; a clone by path copies loose objects as they
    are), so an object planted under the id of the release's file, holding other bytes, would be what the tag
    serves."""
    with Folder.open(staged) as source:
        for path in files:
            oid = entries[path].split()[-1]
            if hashlib.sha256(repo.blob(oid)).digest() != hashlib.sha256(source.read_bytes(path)).digest():
                raise NeedlebenchError(
                    f"the repository's object {oid} ({printable(path)}) in {repo.path} holds other bytes than its id "
                    "says: it is corrupt or was planted"
                )


def _advance_branch(repo: GitRepo, branch: str, parent: str | None, commit: str, staged: Path) -> None:
    """Move the branch to ``commit`` (only if it still is at ``parent``), updating a checked-out work tree first.

    The work tree and the index are updated by needlebench, not by ``git read-tree -u``: git commands that need a work
    tree (``read-tree -u``, ``status``) ``chdir`` to its absolute path, looked up again by name (``setup_work_tree`` in
    git's ``setup.c``), so a second process renaming the folder and putting a link at its name at that moment would have
    git read another repository's configuration and run its filters. The release's files are written from the private
    staged copy through the repository's descriptor (:meth:`Folder.atomic`), the files the release drops are removed the
    same way, and the index is merged in a private copy (``read-tree -m -i``: index only) put back into ``.git`` through
    its descriptor."""
    if commit == parent:
        return
    if not repo.bare:
        old_tree = (
            repo.run("rev-parse", f"{parent}^{{tree}}").strip()
            if parent
            else repo.run("hash-object", "-t", "tree", "-w", "--stdin", stdin="").strip()
        )
        old = repo.tree_entries(parent) if parent else {}
        new = repo.tree_entries(commit)
        _check_out_release(repo, staged, old, new)
        with tempfile.TemporaryDirectory(prefix="needlebench-git-") as temp, _git_dir(repo) as git_dir:
            index = Path(temp) / "index"
            if git_dir.is_file("index"):
                with Folder.open(temp) as private, git_dir.open_read("index") as reader:
                    with private.atomic("index", mode=0o600) as writer:
                        shutil.copyfileobj(reader, writer, 1 << 20)
            repo.run("read-tree", "-m", "-i", old_tree, commit, index_file=index)
            with open(index, "rb") as reader, git_dir.atomic("index", mode=0o644) as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
    _set_ref(repo, branch, commit, parent, f"needlebench publish {commit[:12]}")


#: The null object id git writes for "no value" (a reflog line of a new ref).
_NULL_OID = "0" * 40


def _git_dir(repo: GitRepo) -> contextlib.AbstractContextManager[Folder]:
    """The repository's git folder, open (the folder itself for a bare repository, left open)."""
    return contextlib.nullcontext(repo.root) if repo.bare else repo.root.sub(".git")


def _set_ref(repo: GitRepo, ref: str, new: str, old: str | None, message: str) -> None:
    """``git update-ref -m MESSAGE REF NEW OLD`` done through the repository's descriptor: git names a ref's lock
    file by its absolute path (``tempfile.c``: "the tempfile API needs absolute paths"), looked up again by name,
    so a folder renamed and swapped for a link meanwhile would take the ref elsewhere. Same protocol as git
    (``REF.lock`` created exclusively, the old value checked while it is held, renamed over the ref), same reflog
    lines (``logs/REF``, and ``logs/HEAD`` for the checked-out branch, in a repository with a work tree: git's
    default ``core.logAllRefUpdates``)."""
    try:
        _write_ref(repo, ref, new, old, message)
    except OSError as error:
        raise NeedlebenchError(
            f"cannot update {ref} of {repo.path}: {error.strerror or error} ({printable(str(error.filename))})"
        ) from None


def _ref_files(repo: GitRepo, refs: list[str]) -> list[str]:
    """The files :func:`_set_ref` writes for ``refs`` (each ref, its lock, its reflog and ``logs/HEAD``)."""
    names = [name for ref in refs for name in (ref, f"{ref}.lock")]
    if not repo.bare:
        names += [f"logs/{ref}" for ref in refs if ref.startswith("refs/heads/")] + ["logs/HEAD"]
    return names


def _check_ref_paths(repo: GitRepo, refs: list[str], new: list[str]) -> None:
    """Before anything moves: every file :func:`_set_ref` will write for ``refs`` is absent or a regular file (a new
    ref and every lock absent), every folder on the way absent or a folder; else one line and nothing is changed
    (no branch moved before a tag that cannot be written)."""
    with _git_dir(repo) as git_dir:
        for name in _ref_files(repo, refs):
            parts = PurePosixPath(name).parts
            for depth in range(1, len(parts)):
                info = git_dir.lstat("/".join(parts[:depth]))
                if info is None:
                    break
                if not stat.S_ISDIR(info.st_mode):
                    raise _ref_path_error(git_dir.path / "/".join(parts[:depth]), "is not a folder")
            info = git_dir.lstat(name)
            if info is None:
                continue
            if name.endswith(".lock") or name in new:
                raise _ref_path_error(git_dir.path / name, "already exists")
            if not stat.S_ISREG(info.st_mode):
                raise _ref_path_error(git_dir.path / name, "is not a regular file")


def _ref_path_error(path: Path, what: str) -> NeedlebenchError:
    return NeedlebenchError(
        f"{printable(str(path))} {what}; git could not update the refs of the release there, so nothing was "
        "published (remove it, or give a new or empty folder)"
    )


def _write_ref(repo: GitRepo, ref: str, new: str, old: str | None, message: str) -> None:
    lock = f"{ref}.lock"
    with _git_dir(repo) as git_dir:
        if not git_dir.is_dir(str(PurePosixPath(ref).parent)):
            git_dir.mkdir(str(PurePosixPath(ref).parent))
        if not git_dir.create_new(lock, f"{new}\n".encode(), mode=0o644):
            raise NeedlebenchError(f"{git_dir.path / lock} exists: another git command is updating {ref}; try again")
        try:
            current = repo.run("rev-parse", "-q", "--verify", ref, check=False).strip() or None
            if current != old:
                raise NeedlebenchError(f"{ref} of {repo.path} moved while it was published ({current}); publish again")
            git_dir.replace_from(git_dir, lock, ref)
        except BaseException:
            git_dir.unlink(lock)
            raise
        if repo.bare or not ref.startswith("refs/heads/"):
            return
        epoch = os.environ.get("SOURCE_DATE_EPOCH", str(DEFAULT_GIT_EPOCH))
        line = f"{old or _NULL_OID} {new} {GIT_IDENTITY['name']} <{GIT_IDENTITY['email']}> {epoch} +0000\t{message}\n"
        logs = [f"logs/{ref}"]
        if repo.run("symbolic-ref", "-q", "HEAD", check=False).strip() == ref:
            logs.append("logs/HEAD")
        for log in logs:
            git_dir.mkdir(str(PurePosixPath(log).parent))
            git_dir.append_bytes(log, line.encode("utf-8"), mode=0o666)


def _tag_release(repo: GitRepo, tag: str, commit: str) -> None:
    """``git tag -a TAG -m "needlebench release TAG" COMMIT``: the same tag object (``git mktag``, which writes it
    under the repository's relative ``objects/``), its ref set through the descriptor (:func:`_set_ref`)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", str(DEFAULT_GIT_EPOCH))
    text = (
        f"object {commit}\ntype commit\ntag {tag}\n"
        f"tagger {GIT_IDENTITY['name']} <{GIT_IDENTITY['email']}> {epoch} +0000\n\nneedlebench release {tag}\n"
    )
    oid = repo.run("mktag", stdin=text).strip()
    if repo.run("cat-file", "tag", oid, check=False) != text:  # an object planted under the tag's id is not it
        raise NeedlebenchError(
            f"the repository's object {oid} (tag {tag}) in {repo.path} holds other bytes than its id says: it is "
            "corrupt or was planted"
        )
    _set_ref(repo, f"refs/tags/{tag}", oid, None, f"needlebench release {tag}")


def _check_out_release(repo: GitRepo, staged: Path, old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """Write the files the release changes (those of ``new`` not in ``old`` as they are, all held in ``staged``) into
    the work tree and remove the files of ``old`` the release drops (and the folders this empties), through the
    repository's descriptor; files git would write 0666 less the umask (``checkout_entry``), a link planted at a name
    replaced, never followed."""
    root = repo.root
    try:
        with Folder.open(staged) as source:
            for path, meta in sorted(new.items()):
                if old.get(path) == meta or not source.is_file(path):
                    continue  # unchanged by the release: left as it is (as read-tree -m -u leaves it)
                mode = 0o777 if meta.startswith("100755") else 0o666
                with source.open_read(path) as reader, root.atomic(path, mode=mode, create_parents=True) as writer:
                    shutil.copyfileobj(reader, writer, 1 << 20)
        for path in sorted(set(old) - set(new)):
            root.unlink(path)
            parts = PurePosixPath(path).parts[:-1]
            for depth in range(len(parts), 0, -1):
                if not root.rmdir("/".join(parts[:depth])):
                    break
    except OSError as error:
        raise NeedlebenchError(
            f"cannot update the work tree of {repo.path}: {error.strerror or error} ({printable(str(error.filename))})"
        ) from None


def _uncommitted(repo: GitRepo, head: str | None) -> str | None:
    """A path with uncommitted changes in a work-tree repository (what ``git status --porcelain
    --untracked-files=no`` lists), or None: staged changes from the index (``diff-index --cached``, no work tree
    needed), and each tracked file compared through the repository's descriptor (never by a path git looks up
    again, see :func:`_advance_branch`): a missing file, another kind or executable bit, or content whose blob id
    differs from the index's (raw bytes: needlebench runs no clean filter, so a file the index holds through one,
    as a Git LFS work tree does, counts as changed)."""
    if head is not None:
        staged = repo.run("diff-index", "--cached", "--name-only", "-z", head, "--").split("\0")[0]
        if staged:
            return staged
    for record in filter(None, repo.run("ls-files", "-s", "-z").split("\0")):
        meta, path = record.split("\t", 1)
        mode, oid, stage = meta.split()
        if head is None or stage != "0":
            return path  # a file staged in a repository without commits, an unmerged file
        if mode == "160000":
            continue  # a submodule: git status compares its commit, a release never changes it
        if not _same_as_index(repo, path, mode, oid):
            return path
    return None


def _same_as_index(repo: GitRepo, path: str, mode: str, oid: str) -> bool:
    try:
        info = repo.root.lstat(path)
        if info is None:
            return False
        if mode == "120000":
            if not stat.S_ISLNK(info.st_mode):
                return False
            with repo.root._parent(path) as (parent, leaf):
                target = os.readlink(leaf, dir_fd=parent.fd).encode("utf-8", "surrogateescape")
            return _blob_id(target) == oid
        if not stat.S_ISREG(info.st_mode) or bool(info.st_mode & 0o100) != (mode == "100755"):
            return False
        with repo.root.open_read(path) as reader:
            digest = hashlib.sha1(f"blob {os.fstat(reader.fileno()).st_size}\0".encode())
            while chunk := reader.read(1 << 20):
                digest.update(chunk)
        # raw bytes only: a clean filter (gitattributes(5)) is a program the repository's configuration names, and
        # that configuration may have been swapped since it was checked; a file the index holds through a filter
        # (a Git LFS pointer) is reported as differing
        return digest.hexdigest() == oid
    except (OSError, NeedlebenchError):
        return False


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def publish_to_git(folder: Path, git_path: Path, *, version: str, repo_id: str | None = None) -> PublishResult:
    """Publish a dataset folder into the git repository ``git_path`` (created if absent) and tag it.

    The release is committed on the checked-out branch (``main`` for a new repository) with a fixed author and
    date, keeping the branch's files other than the card, the manifest and ``data/**``. ``repo_id`` (for the card's
    usage lines) defaults to ``ORG/NAME`` when the path ends in ``datasets/ORG/NAME`` (an olah mirror layout).
    """
    version = parse_version(version)
    tag = tag_for(version)
    git_path = Path(os.path.abspath(Path(git_path).expanduser()))  # links on it: Folder.open decides
    if repo_id is None and len(git_path.parts) >= 3 and git_path.parts[-3] == "datasets":
        candidate = "/".join(git_path.parts[-2:])
        repo_id = candidate if _valid_repo_id(candidate) else None
    elif repo_id is not None:
        check_repo_id(repo_id)
    manifest = prepare_folder(folder)
    repo, created = _open_git_repo(git_path)
    with repo.root:
        try:
            return _publish_git(repo, Path(folder), manifest, version=version, tag=tag, repo_id=repo_id)
        except BaseException:
            if created is not None:  # nothing half-published: drop the repository this call initialised
                _remove_new_repo(git_path, created, repo.root)
            raise


def _valid_repo_id(candidate: str) -> bool:
    try:
        check_repo_id(candidate)
    except NeedlebenchError:
        return False
    return True


def _publish_git(
    repo: GitRepo, folder: Path, manifest: dict[str, Any], *, version: str, tag: str, repo_id: str | None
) -> PublishResult:
    tags = repo.tags()
    if tag in tags:
        commit = _existing_release(repo, folder, manifest, version=version, tag=tag, repo_id=repo_id, tags=tags)
        return release_result(str(repo.path), commit, tag, False, how_to_load_git(repo.path, repo_id, tag, manifest))
    check_not_older(version, tags, str(repo.path))
    branch = _branch(repo)
    parent = repo.resolve("HEAD")
    changed = None if repo.bare else _uncommitted(repo, parent)
    if changed is not None:
        raise NeedlebenchError(
            f"{repo.path} has uncommitted changes ({printable(changed)}; compared byte for byte, no clean filter "
            "such as Git LFS is run); commit or discard them before publishing"
        )
    _check_ref_paths(repo, [branch, f"refs/tags/{tag}"], [f"refs/tags/{tag}"])
    changelog = build_changelog([*_git_history(repo, tags, version), (version, manifest)])
    _prepare_objects(repo)
    with staged_release(folder, manifest, repo_id=repo_id, version=version, changelog=changelog) as staged:
        files = [CARD_NAME, *content_files(manifest)]
        message = f"Release {tag}\n\n" + "\n".join(f"- {change}" for change in changelog[0]["changes"]) + "\n"
        commit = _commit_release(repo, staged, files, parent, message)
        _advance_branch(repo, branch, parent, commit, staged)
    _tag_release(repo, tag, commit)
    return release_result(str(repo.path), commit, tag, True, how_to_load_git(repo.path, repo_id, tag, manifest))


def _existing_release(
    repo: GitRepo,
    folder: Path,
    manifest: dict[str, Any],
    *,
    version: str,
    tag: str,
    repo_id: str | None,
    tags: dict[str, str],
) -> str:
    """The commit of an existing release tag when it already holds exactly what this publish would commit, else a
    one-line refusal (tags are never moved).

    "Exactly" is the whole tree: the card this publish renders, the manifest and the data files (each blob's bytes
    read back, :func:`_check_blobs`), and the branch's other files as a release would keep them (the files of the
    checked-out branch other than the card, the manifest and ``data/**``: what a new release commits too; the card
    names its data files, so the loader reads none of them). Nothing else: a file under ``data/`` or another card
    than this one could make ``load_dataset`` read other rows. A release tag names a commit (``git tag TAG <tree>``
    names a tree, which no branch holds)."""
    commit = repo.resolve(f"refs/tags/{tag}")
    if commit is None:
        raise NeedlebenchError(
            f"tag {tag} of {repo.path} does not name a commit; a release tag names a release commit: delete the tag "
            "or publish a new version"
        )
    changelog = build_changelog([*_git_history(repo, tags, version), (version, manifest)])
    with staged_release(folder, manifest, repo_id=repo_id, version=version, changelog=changelog) as staged:
        files = [CARD_NAME, *content_files(manifest)]
        entries = _release_entries(repo, staged, files, repo.resolve("HEAD"), write=False)
        _check_release(
            repo,
            commit,
            staged,
            files,
            entries,
            f"tag {tag} of {repo.path} already holds different data",
            "tags are never moved, publish a new version",
        )
    return commit
