"""Data comes from the manifest, not the card; hostile manifest values are input errors (issue 33).

Each attack runs the `needlebench` command (a subprocess) in a sandbox: a fake HOME holding the user's files and a
hostile dataset folder. The sandbox is hashed before and after: nothing of the user's changes, a refused command
exits 2 with one line naming the file, the field or the config.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import ClientError, olah_fixture
from support.sandbox import REAL_CONFIG, REAL_HF_HOME, refused, run, snapshot

SHARD = "data/atc_en/test-00000-of-00001.parquet"
SECRET = "THE USER'S PRIVATE ROW"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A real build of atc_en (the hostile folder's honest part)."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    out = tmp_path_factory.mktemp("honest") / "ds"
    build_dataset(["atc_en"], out, BuildOptions(), progress=False)
    return out


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "needlebench.json").read_text())


def _first_id(folder: Path) -> str:
    import pyarrow.parquet as pq

    return pq.read_table(folder / SHARD, columns=["id"]).column("id")[0].as_py()


def _secret_copy(source: Path, target: Path) -> None:
    """A Parquet file with the dataset's columns whose every prompt is the user's private text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    prompts = pa.array([SECRET] * table.num_rows, type=table.schema.field("prompt").type)
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.set_column(table.schema.get_field_index("prompt"), "prompt", prompts), target)


def _point_card(folder: Path, path: str) -> None:
    card = (folder / "README.md").read_text()
    assert "path: data/atc_en/test-*.parquet" in card
    (folder / "README.md").write_text(card.replace("path: data/atc_en/test-*.parquet", f"path: {path}"))


def _clone(dataset: Path, sandbox: Path) -> Path:
    clone = sandbox / "clone"
    shutil.copytree(dataset, clone)
    return clone


# --- the card's data_files ----------------------------------------------------------------------------------------

CARD_TARGETS = {
    "outside": "../mydata/private-*.parquet",
    "inside": "data/atc_en/tampered-*.parquet",
    "url": "https://example.invalid/private-00000.parquet",
}


@pytest.mark.slow
@pytest.mark.parametrize("target", list(CARD_TARGETS))
def test_show_never_reads_what_the_card_points_at(dataset, sandbox, target):
    """A card whose data_files point at the user's files, at other files of the folder or at a URL: `show` refuses
    in one line naming the config and both values; it prints no row, fetches nothing."""
    clone = _clone(dataset, sandbox)
    _secret_copy(clone / SHARD, sandbox / "mydata" / "private-00000.parquet")
    _secret_copy(clone / SHARD, clone / "data" / "atc_en" / "tampered-00000.parquet")
    _point_card(clone, CARD_TARGETS[target])
    before = snapshot(sandbox.parent)
    result = run(sandbox, "show", str(clone), _first_id(clone), "--prompt", env={"HF_HUB_OFFLINE": "1"})
    line = refused(result, "atc_en", CARD_TARGETS[target], SHARD)
    assert SECRET not in result.stdout + line
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_verify_fails_when_the_card_loads_other_files(dataset, sandbox, target):
    """`verify` says the config differs (exit 1, naming the card's value) instead of "all fingerprints match"."""
    clone = _clone(dataset, sandbox)
    _secret_copy(clone / SHARD, sandbox / "mydata" / "private-00000.parquet")
    _secret_copy(clone / SHARD, clone / "data" / "atc_en" / "tampered-00000.parquet")
    _point_card(clone, CARD_TARGETS[target])
    before = snapshot(sandbox.parent)
    result = run(sandbox, "verify", str(clone))
    assert result.returncode == 1, result.stderr[-2000:]
    assert "differs atc_en" in result.stdout and CARD_TARGETS[target] in result.stdout, result.stdout
    assert "all configs match" not in result.stdout and "Traceback" not in result.stderr
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
def test_verify_fails_when_the_folder_has_no_card(dataset, sandbox):
    """Without README.md, `load_dataset(folder, config)` finds none of the manifest's configs (it reads every
    Parquet file as one default config): not "all fingerprints match"."""
    clone = _clone(dataset, sandbox)
    (clone / "README.md").unlink()
    result = run(sandbox, "verify", str(clone))
    assert result.returncode == 1, result.stderr[-2000:]
    assert "differs atc_en: the folder has no README.md card" in result.stdout, result.stdout
    assert "all configs match" not in result.stdout


@pytest.mark.slow
def test_eval_never_reads_what_the_card_points_at(dataset, sandbox, tmp_path):
    """`needlebench eval` (the lm-eval task's custom_dataset) refuses the folder in one line: no row of the user's
    file reaches a model."""
    clone = _clone(dataset, sandbox)
    _secret_copy(clone / SHARD, sandbox / "mydata" / "private-00000.parquet")
    _point_card(clone, CARD_TARGETS["outside"])
    before = snapshot(sandbox.parent)
    output = tmp_path / "results"
    result = run(
        sandbox,
        "eval",
        "run",
        "--model",
        "needlebench-oracle",
        "--tasks",
        "needlebench_atc_en",
        "--metadata",
        json.dumps({"data_dir": str(clone)}),
        "--limit",
        "2",
        "--output_path",
        str(output),
        "--log_samples",
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert CARD_TARGETS["outside"] in result.stderr and "Traceback" not in result.stderr
    assert not output.exists() or SECRET not in "".join(p.read_text() for p in output.rglob("*") if p.is_file())
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
def test_an_unlisted_parquet_file_in_the_config_folder_is_never_loaded(dataset, sandbox):
    """A card pointing at every Parquet file of the config folder (its own and a tampered one): `show` refuses;
    the honest card and the extra file: `show` prints the listed row, `verify` names the extra file."""
    clone = _clone(dataset, sandbox)
    _secret_copy(clone / SHARD, clone / "data" / "atc_en" / "test-99999-of-99999.parquet")
    row_id = _first_id(clone)
    result = run(sandbox, "show", str(clone), row_id, "--prompt")
    assert result.returncode == 0, result.stderr[-2000:]
    assert SECRET not in result.stdout and result.stdout.strip()
    verify = run(sandbox, "verify", str(clone))
    assert verify.returncode == 1 and "test-99999-of-99999.parquet" in verify.stdout, verify.stdout


# --- shards that are not regular files, row counts that lie --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "link-to-dev-zero", "link-to-fifo"])
@pytest.mark.parametrize("command", ["show", "verify", "publish"])
def test_a_shard_that_is_not_a_regular_file_is_refused_without_hanging(dataset, sandbox, tmp_path, kind, command):
    clone = _clone(dataset, sandbox)
    row_id = _first_id(clone)
    (clone / SHARD).unlink()
    if kind == "fifo":
        os.mkfifo(clone / SHARD)
    elif kind == "link-to-dev-zero":
        (clone / SHARD).symlink_to("/dev/zero")
    else:
        os.mkfifo(tmp_path / "pipe")
        (clone / SHARD).symlink_to(tmp_path / "pipe")
    before = snapshot(sandbox.parent, skip=clone)  # the snapshot reads files: not the FIFO
    if command == "show":
        refused(run(sandbox, "show", str(clone), row_id, "--prompt"), SHARD)
    elif command == "verify":
        result = run(sandbox, "verify", str(clone))
        assert result.returncode in (1, 2) and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert SHARD in result.stdout + result.stderr
    else:
        refused(run(sandbox, "publish", str(clone), "--version", "1.0.0", "--to-git", str(tmp_path / "r")), SHARD)
        assert not (tmp_path / "r").exists()
    assert snapshot(sandbox.parent, skip=clone) == before


@pytest.mark.slow
@pytest.mark.parametrize("where", ["manifest", "card"])
def test_a_row_count_that_lies_is_noticed_by_verify_and_publish(dataset, sandbox, tmp_path, where):
    clone = _clone(dataset, sandbox)
    if where == "manifest":
        manifest = _manifest(clone)
        manifest["configs"]["atc_en"]["rows"] += 1000
        (clone / "needlebench.json").write_text(json.dumps(manifest, indent=2))
        needle = "rows"
    else:
        rows = _manifest(clone)["configs"]["atc_en"]["rows"]
        card = (clone / "README.md").read_text()
        assert f"num_examples: {rows}\n" in card
        (clone / "README.md").write_text(card.replace(f"num_examples: {rows}\n", "num_examples: 99999\n"))
        needle = "99999"
    before = snapshot(sandbox.parent)
    result = run(sandbox, "verify", str(clone))
    assert result.returncode == 1 and needle in result.stdout and "atc_en" in result.stdout, result.stdout
    refused(run(sandbox, "publish", str(clone), "--version", "1.0.0", "--to-git", str(tmp_path / "r")), "atc_en")
    assert snapshot(sandbox.parent) == before and not (tmp_path / "r").exists()


# --- hostile values in the manifest --------------------------------------------------------------------------------


def _nested(depth: int):
    def change(manifest: dict) -> str:
        text = json.dumps(manifest)
        return text.replace('"recipe": {', '"recipe": {"x": ' + "[" * depth + "]" * depth + ", ", 1)

    return change


HOSTILE = {
    "5,000-digit rows": (lambda m: json.dumps(m).replace('"rows": ', '"rows": ' + "9" * 5000, 1)),
    "5,000-digit recipe value": (
        lambda m: json.dumps(m).replace('"recipe": {', '"recipe": {"seed2": ' + "7" * 5000 + ", ", 1)
    ),
    "experiment a string": (lambda m: json.dumps({**m, "experiments": {"atc_en_x": "not a record"}})),
    "experiment a list": (lambda m: json.dumps({**m, "experiments": {"atc_en_x": [1, 2]}})),
    "experiment wrong field": (lambda m: json.dumps({**m, "experiments": {"atc_en_x": {"kind": 5}}})),
    "Infinity": (lambda m: json.dumps(m).replace('"rows": ', '"rows": Infinity, "x": ', 1)),
    "deep JSON": _nested(5000),
    "600 levels": _nested(600),
    "escape in a file name": (lambda m: json.dumps(m).replace("test-00000", "test-\\u001b]0;pwned\\u0007", 1)),
}
FIELDS = {
    "5,000-digit rows": "configs.atc_en.rows",
    "5,000-digit recipe value": "recipe.seed2",
    "experiment a string": "experiments.atc_en_x",
    "experiment a list": "experiments.atc_en_x",
    "experiment wrong field": "experiments.atc_en_x",
    "Infinity": "configs.atc_en.rows",
    "deep JSON": "needlebench.json",
    "600 levels": "recipe.x",
    "escape in a file name": "\\x1b]0;pwned",
}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["show", "verify", "publish"])
@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_manifest_values_are_one_line_errors(dataset, sandbox, tmp_path, case, command):
    """A huge integer, a non-finite number, an experiment record of the wrong type, deep JSON: exit 2, one line
    naming the file and the field; nothing changed."""
    clone = _clone(dataset, sandbox)
    row_id = _first_id(clone)
    text = HOSTILE[case](_manifest(clone))
    (clone / "needlebench.json").write_text(text)
    before = snapshot(sandbox.parent)
    if command == "show":
        result = run(sandbox, "show", str(clone), row_id)
    elif command == "verify":
        result = run(sandbox, "verify", str(clone))
    else:
        result = run(sandbox, "publish", str(clone), "--version", "1.0.0", "--to-git", str(tmp_path / "r"))
    refused(result, "needlebench.json", FIELDS[case])
    assert snapshot(sandbox.parent) == before


# --- publish --to-git into a repository that is not ours ------------------------------------------------------------


def _git(*args: str, cwd: Path) -> str:
    identity = ["-c", "user.name=user", "-c", "user.email=u@example.invalid", "-c", "commit.gpgSign=false"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60)
    return done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("bare", [False, True])
def test_publish_to_git_refuses_a_users_own_repository(dataset, sandbox, bare):
    """A user's repository with tracked README.md and data/: refused in one line before anything changes (a
    release would replace them in the work tree)."""
    work = sandbox / "project"
    (work / "data").mkdir(parents=True)
    (work / "README.md").write_text("my project\n")
    (work / "data" / "results.csv").write_text("a,b\n1,2\n")
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "mine", cwd=work)
    target = work
    if bare:
        target = sandbox / "project.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(work), str(target)], check=True, timeout=60)
    before = snapshot(sandbox.parent)
    refused(run(sandbox, "publish", str(dataset), "--version", "1.0.0", "--to-git", str(target)), str(target))
    assert snapshot(sandbox.parent) == before


@pytest.mark.slow
def test_publishing_again_into_our_own_release_repository_works(dataset, sandbox):
    repo = sandbox / "release"
    first = run(sandbox, "publish", str(dataset), "--version", "1.0.0", "--to-git", str(repo))
    assert first.returncode == 0, first.stderr[-2000:]
    second = run(sandbox, "publish", str(dataset), "--version", "1.0.1", "--to-git", str(repo))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "v1.0.1" in _git("tag", cwd=repo).split()


# --- the Hub token -------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("token", ["hf_SecretTokenValue123\r", "hf_Secret\x1bTokenValue123", "hf_SecretTokén12"])
def test_a_token_with_a_control_character_is_refused_and_never_shown(dataset, sandbox, token):
    before = snapshot(sandbox.parent)
    result = run(
        sandbox,
        "publish",
        str(dataset),
        "--version",
        "1.0.0",
        "--repo",
        "org/needlebench",
        "--token",
        token,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"},
    )
    line = refused(result, "token")
    assert "SecretToken" not in result.stdout + result.stderr and "Secret" not in line
    assert snapshot(sandbox.parent) == before


def test_hub_error_messages_never_show_a_token():
    from needlebench.sources.hub import redact_tokens

    message = redact_tokens("Illegal header value b'Bearer hf_abcdefSECRET\\r' for hf_zzzzSECRET2")
    assert "SECRET" not in message and "Bearer ***" in message


# --- the on-the-fly cache --------------------------------------------------------------------------------------------

_LOAD = """
import os, sys
os.umask(0)
from needlebench.evaluation.harness.tasks import load_dataset
print(load_dataset(needlebench_config="atc_en")["test"].num_rows)
"""


@pytest.mark.slow
def test_the_on_the_fly_cache_is_private_whatever_the_umask(sandbox, tmp_path):
    cache = sandbox / ".cache" / "needlebench"
    environment = {
        **os.environ,
        "HOME": str(sandbox),
        "XDG_CONFIG_HOME": REAL_CONFIG,
        "HF_HOME": REAL_HF_HOME,
        "NEEDLEBENCH_CACHE": str(cache),
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
    }
    result = subprocess.run(
        [sys.executable, "-c", _LOAD], capture_output=True, text=True, env=environment, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    datasets = cache / "datasets"
    assert datasets.stat().st_mode & 0o777 == 0o700
    (folder,) = [path for path in datasets.iterdir() if path.is_dir()]
    assert folder.stat().st_mode & 0o777 == 0o700
    (lock,) = datasets.glob("*.lock")
    assert lock.stat().st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_a_hostile_manifest_at_an_earlier_tag_is_an_earlier_release(dataset, sandbox):
    """The changelog reads the manifests of earlier tags: one with a 5,000-digit integer is listed as an earlier
    release, the publish goes on (no internal error)."""
    repo = sandbox / "release"
    assert run(sandbox, "publish", str(dataset), "--version", "1.0.0", "--to-git", str(repo)).returncode == 0
    honest = (repo / "needlebench.json").read_text()
    (repo / "needlebench.json").write_text(honest.replace('"rows": ', '"rows": ' + "9" * 5000, 1))
    _git("commit", "-q", "-am", "hostile", cwd=repo)
    _git("tag", "v1.0.1", cwd=repo)
    (repo / "needlebench.json").write_text(honest)
    _git("commit", "-q", "-am", "honest again", cwd=repo)
    result = run(sandbox, "publish", str(dataset), "--version", "1.1.0", "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "**v1.0.1**: earlier release" in (repo / "README.md").read_text()


@pytest.mark.slow
def test_a_card_header_two_readers_would_split_differently_is_refused(dataset, sandbox):
    """``huggingface_hub`` ends the YAML header at ``--- `` (a trailing space), ``datasets`` reads on to the next
    ``---``: a second header there could give the config other files; `show` refuses, `verify` says it differs."""
    clone = _clone(dataset, sandbox)
    card = (clone / "README.md").read_text()
    header_end = card.index("\n---\n", 4)
    evil = "\nconfigs:\n- config_name: atc_en\n  data_files:\n  - split: test\n    path: ../mydata/*.parquet"
    (clone / "README.md").write_text(card[:header_end] + "\n--- " + evil + card[header_end:])
    before = snapshot(sandbox.parent)
    refused(run(sandbox, "show", str(clone), _first_id(clone)), "README.md", "header")
    result = run(sandbox, "verify", str(clone))
    assert result.returncode == 1 and "header" in result.stdout, result.stdout + result.stderr[-2000:]
    assert snapshot(sandbox.parent) == before


# --- a Hub dataset (a local olah server) ---------------------------------------------------------------------------

hub = olah_fixture()


@pytest.mark.slow
def test_a_hub_dataset_whose_card_points_elsewhere_is_refused(dataset, hub):
    """`data_repo` (the lm-eval tasks' Hub source): the manifest is read first, then only the files it lists; a
    card whose data_files point at a URL (or anywhere else) is refused in one line, nothing is fetched from it."""
    from needlebench.dataset.publish import publish_to_git

    repo = hub.repo_path("org/hostile")
    publish_to_git(dataset, repo, version="1.0.0")
    card = (repo / "README.md").read_text()
    url = "https://example.invalid/private-00000.parquet"
    (repo / "README.md").write_text(card.replace("path: data/atc_en/test-*.parquet", f"path: {url}"))
    _git("commit", "-q", "-am", "point the card elsewhere", cwd=repo)
    _git("tag", "v1.0.1", cwd=repo)
    load = "needlebench.dataset.load:load_split"
    (hostile,) = hub.calls([(load, ("atc_en",), {"repo_id": "org/hostile", "revision": "v1.0.1"})])
    assert isinstance(hostile, ClientError) and hostile.type_name == "NeedlebenchError", hostile
    assert url in hostile.message and "atc_en" in hostile.message and "\n" not in hostile.message
