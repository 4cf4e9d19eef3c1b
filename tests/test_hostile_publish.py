"""`publish`, `verify` and `show` on folders and repositories from someone else (issue 33).

Each attack runs the `needlebench` command (a subprocess) in a sandbox: a fake HOME holding the user's files and the
hostile folder or repository. The user's files are hashed before and after; a command an attacker planted would
leave ``~/PWNED``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, refused, run, snapshot

pytestmark = pytest.mark.slow

SHARD = "data/atc_en/test-00000-of-00001.parquet"
PWN = 'touch "$HOME/PWNED"'
#: Terminal escapes a row's prompt may carry (ECMA-48 OSC 8 link, OSC 0 window title, CSI 2J; a CR; RLO U+202E)
#: and the C1 CSI (U+009B), which json.dumps(ensure_ascii=False) leaves as it is.
ESCAPES = ["\x1b]8;;https://evil.example/\x07", "\x1b]0;owned\x07", "\x1b[2J", "\r", "\u202e", "\x9b31m"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """`needlebench build atc_en --out DS`, once."""
    out = tmp_path_factory.mktemp("built") / "ds"
    result = subprocess.run([*CLI, "build", "atc_en", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def _copy(built: Path, home: Path, name: str = "ds") -> Path:
    target = home / "work" / name
    shutil.copytree(built, target)
    return target


def _users(home: Path) -> dict:
    """The user's own files (everything but the work folder, where the hostile things sit)."""
    return snapshot(home, skip=home / "work")


def _git(*args: str, cwd: Path) -> str:
    identity = ["-c", "user.name=attacker", "-c", "user.email=a@example.invalid", "-c", "commit.gpgSign=false"]
    return subprocess.run(
        ["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=120
    ).stdout


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- 1. a repository from someone else runs none of its commands --------------------------------------------------


def test_hooks_of_a_bare_repository_never_run(built: Path, sandbox: Path) -> None:
    """A bare repository whose reference-transaction, post-commit and pre-commit hooks would write ~/PWNED (its
    configuration is clean, so it is published into, with no hook run)."""
    ds = _copy(built, sandbox)
    repo = sandbox / "work" / "handed.git"
    _git("init", "-q", "--bare", "-b", "main", str(repo), cwd=sandbox / "work")
    for hook in ("reference-transaction", "post-commit", "pre-commit", "post-update", "pre-receive"):
        (repo / "hooks" / hook).write_text(f"#!/bin/sh\n{PWN}\n")
        (repo / "hooks" / hook).chmod(0o755)
    before = _users(sandbox)
    result = run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    assert _git("rev-parse", "v1.0.0^{commit}", cwd=repo).strip()
    assert not (sandbox / "PWNED").exists()
    assert _users(sandbox) == before


@pytest.mark.parametrize(
    ("key", "config", "attributes"),
    [
        ("core.fsmonitor", f'[core]\n\tfsmonitor = "{PWN}"\n', None),
        ("filter.x.clean", f'[filter "x"]\n\tclean = "{PWN}"\n\tsmudge = "{PWN}"\n', "* filter=x\n"),
        ("core.pager", f'[core]\n\tpager = "{PWN}"\n', None),
        ("include.path", "[include]\n\tpath = ../../evil.config\n", None),
        ("alias.status", f'[alias]\n\tstatus = "!{PWN}"\n', None),
    ],
)
def test_repository_configuration_that_runs_commands_is_refused(
    built: Path, sandbox: Path, key: str, config: str, attributes: str | None
) -> None:
    """A work-tree repository (holding an honest release) whose .git/config sets a key that makes git run a command
    is refused in one line naming the key, before git runs in it."""
    ds = _copy(built, sandbox)
    repo = sandbox / "work" / "handed"
    assert run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)).returncode == 0
    if attributes:
        (repo / ".gitattributes").write_text(attributes)
        _git("add", ".gitattributes", cwd=repo)
        _git("commit", "-q", "-m", "attributes", cwd=repo)
    (sandbox / "work" / "evil.config").write_text(f'[core]\n\tfsmonitor = "{PWN}"\n')
    with (repo / ".git" / "config").open("a") as handle:
        handle.write(config)
    (repo / "README.md").touch()  # stat-dirty: git status would run the fsmonitor and the clean filter
    before = _users(sandbox)
    refused(run(sandbox, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo)), key, "config")
    assert not (sandbox / "PWNED").exists()
    assert _users(sandbox) == before


def test_a_cloned_release_repository_is_still_accepted(built: Path, sandbox: Path) -> None:
    """What `git clone` writes into .git/config (a remote, a branch, core settings) is allowed."""
    ds = _copy(built, sandbox)
    origin = sandbox / "work" / "origin.git"
    _git("init", "-q", "--bare", "-b", "main", str(origin), cwd=sandbox / "work")
    assert run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(origin)).returncode == 0
    clone = sandbox / "work" / "clone"
    _git("clone", "-q", str(origin), str(clone), cwd=sandbox / "work")
    result = run(sandbox, "publish", str(ds), "--version", "1.0.1", "--to-git", str(clone))
    assert result.returncode == 0, result.stderr[-2000:]


# --- 2. the bytes tagged are the bytes checked ------------------------------------------------------------------

_RACER = """
import sys
import needlebench.dataset.publish as publish

real = publish.file_difference
shard = sys.argv.pop(1)

def checked_then_rewritten(*args, **kwargs):
    reason = real(*args, **kwargs)
    with open(shard, "r+b") as handle:  # a second process rewrites the handed shard in place, after the check
        data = bytearray(handle.read())
        data[len(data) // 2] ^= 0xFF
        handle.seek(0)
        handle.write(data)
    return reason

publish.file_difference = checked_then_rewritten
from needlebench.cli import main
main()
"""


def test_a_shard_rewritten_after_the_check_is_not_what_gets_tagged(built: Path, sandbox: Path) -> None:
    ds = _copy(built, sandbox)
    fingerprint = json.loads((ds / "needlebench.json").read_text())["configs"]["atc_en"]["fingerprint"]
    repo = sandbox / "work" / "release"
    environment = {**os.environ, "HOME": str(sandbox), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            _RACER,
            str(ds / SHARD),
            "publish",
            str(ds),
            "--version",
            "1.0.0",
            "--to-git",
            str(repo),
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=sandbox / "work",
        timeout=600,
        check=False,
    )
    assert _sha256((ds / SHARD).read_bytes()) != fingerprint  # the racer did rewrite it
    if result.returncode == 2:  # refused is fine too
        refused(result, "changed")
        return
    assert result.returncode == 0, result.stderr[-2000:]
    tagged = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"v1.0.0:{SHARD}"], capture_output=True, check=True
    ).stdout
    assert _sha256(tagged) == fingerprint


# --- 3. a standalone .huggingface.yaml -------------------------------------------------------------------------


def test_a_huggingface_yaml_is_a_difference_and_refused(built: Path, sandbox: Path) -> None:
    ds = _copy(built, sandbox)
    (ds / "data" / "other").mkdir()
    shutil.copy(ds / SHARD, ds / "data" / "other" / "test-00000-of-00001.parquet")
    (ds / ".huggingface.yaml").write_text(
        "configs:\n- config_name: atc_en\n  data_files:\n  - split: test\n    path: data/other/*.parquet\n"
    )
    before = _users(sandbox)
    verified = run(sandbox, "verify", str(ds))
    assert verified.returncode == 1 and ".huggingface.yaml" in verified.stdout, (verified.stdout, verified.stderr)
    refused(run(sandbox, "show", str(ds), "atc_en-x"), ".huggingface.yaml")
    repo = sandbox / "work" / "release"
    refused(run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)), ".huggingface.yaml")
    assert not repo.exists()
    assert _users(sandbox) == before


def test_needlebench_writes_no_huggingface_yaml(built: Path) -> None:
    assert not (built / ".huggingface.yaml").exists()


# --- 4. a YAML alias bomb in the card ---------------------------------------------------------------------------


def _alias_bomb() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    return "\n".join([*lines, "configs: *a9"])


def test_an_alias_bomb_in_the_card_is_refused_quickly(built: Path, sandbox: Path) -> None:
    ds = _copy(built, sandbox)
    card = (ds / "README.md").read_text()
    body = card.split("\n---\n", 1)[1]
    (ds / "README.md").write_text(f"---\n{_alias_bomb()}\n---\n{body}")
    before = _users(sandbox)
    environment = {**os.environ, "HOME": str(sandbox), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    for args in (["verify", str(ds)], ["show", str(ds), "atc_en-x"]):
        # the bomb expands to 9**9 items: a loader that follows aliases hangs or runs out of memory
        result = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, env=environment, cwd=sandbox / "work", timeout=60
        )
        if args[0] == "verify" and result.returncode == 1:
            assert "alias" in result.stdout and "Traceback" not in result.stderr, result.stdout
        else:
            refused(result, "README.md", "alias")
    assert _users(sandbox) == before


# --- 5. terminal escapes in a row's prompt ----------------------------------------------------------------------


def _hostile_prompt_dataset(built: Path, home: Path) -> tuple[Path, str, str]:
    """A copy of the dataset whose first row's prompt carries terminal escapes, its manifest fingerprint updated
    (what a sender can do): (folder, row id, prompt)."""
    import pyarrow.parquet as pq

    ds = _copy(built, home)
    table = pq.read_table(ds / SHARD)
    prompts = table.column("prompt").to_pylist()
    prompt = "Read this.\tThen " + "".join(ESCAPES) + " answer.\n" + prompts[0]
    prompts[0] = prompt
    table = table.set_column(table.schema.get_field_index("prompt"), "prompt", [prompts])
    pq.write_table(table, ds / SHARD)
    manifest = json.loads((ds / "needlebench.json").read_text())
    manifest["configs"]["atc_en"]["fingerprint"] = _sha256((ds / SHARD).read_bytes())
    (ds / "needlebench.json").write_text(json.dumps(manifest, indent=2))
    return ds, table.column("id")[0].as_py(), prompt


def _run_on_terminal(home: Path, *args: str) -> tuple[int, str]:
    """Run the command with stdout on a pseudo-terminal: (exit status, what the terminal received)."""
    environment = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*CLI, *args], stdout=terminal, stderr=subprocess.PIPE, env=environment, cwd=home / "work"
    )
    os.close(terminal)
    received = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(controller, 1 << 16)
        except OSError:  # EIO: the command closed the terminal
            break
        if not chunk:
            break
        received += chunk
    os.close(controller)
    process.wait(timeout=120)
    return process.returncode, received.decode("utf-8", "replace")


def test_show_escapes_a_prompt_for_a_terminal_and_pipes_it_exactly(built: Path, sandbox: Path) -> None:
    ds, row_id, prompt = _hostile_prompt_dataset(built, sandbox)
    for args in (["--prompt"], []):
        status, shown = _run_on_terminal(sandbox, "show", str(ds), row_id, *args)
        assert status == 0, shown[-2000:]
        shown = shown.replace("\r\n", "\n")  # the terminal's own line discipline (onlcr)
        for escape in ESCAPES:
            assert escape not in shown, (escape, args)
        assert "\\x1b]0;owned\\x07" in shown and "\\u202e" in shown and "\\r" in shown
        assert "Read this.\tThen " in shown and " answer.\n" in shown  # tabs and line breaks kept
    piped = run(sandbox, "show", str(ds), row_id, "--prompt")
    assert piped.returncode == 0, piped.stderr[-2000:]
    raw = subprocess.run(
        [*CLI, "show", str(ds), row_id, "--prompt"],
        capture_output=True,
        env={**os.environ, "HOME": str(sandbox), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME},
        cwd=sandbox / "work",
        timeout=600,
        check=True,
    ).stdout
    assert raw == prompt.encode("utf-8")  # `show --prompt | sha256sum` is the logged prompt hash
    whole = run(sandbox, "show", str(ds), row_id)
    fields = json.loads(whole.stdout.split("\n--- prompt ---\n", 1)[0])
    assert fields["prompt_sha256"] == _sha256(raw)


# --- 6. publish's how-to-load text -------------------------------------------------------------------------------


def test_publish_prints_its_how_to_load_text_line_by_line(built: Path, sandbox: Path) -> None:
    ds = _copy(built, sandbox)
    result = run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(sandbox / "work" / "release"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\\n" not in result.stdout, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].startswith("published ") and len(lines) >= 3, lines


# --- 7. a link planted at the repository path --------------------------------------------------------------------


@pytest.mark.parametrize("target", ["mydata", "outside"])
def test_publish_into_a_planted_link_is_refused(built: Path, sandbox: Path, target: str) -> None:
    ds = _copy(built, sandbox)
    handed = sandbox / "work" / "handed"
    handed.mkdir()
    destination = sandbox / "mydata" if target == "mydata" else sandbox.parent / "outside"
    (handed / "release").symlink_to(destination)
    before = _users(sandbox)
    refused(
        run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(handed / "release")),
        "symbolic link",
    )
    assert _users(sandbox) == before
    assert not (sandbox.parent / "outside").exists()
