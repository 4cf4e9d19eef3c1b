"""The sandbox the hostile-input tests attack in: a fake HOME holding the user's files, the `needlebench` command run
in it as a subprocess, and a snapshot of everything under it (contents, modes, link targets, hard-link counts) to
compare before and after."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from needlebench.cli import main; main()"]
#: The user's real config and Hugging Face folders (the secret keying the caches lives in the former): the fake
#: HOME must not receive them, and the tests share the caches the other tests use.
REAL_CONFIG = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
REAL_HF_HOME = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
DEAD_NAME = "abcdefgh"


# --- the sandbox ------------------------------------------------------------------------------------------------


def snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Everything under `root` (but `skip`), without following links: kind, mode, hard links, sha256 or target."""
    found: dict[str, tuple] = {}
    for directory, folders, files in os.walk(root):
        here = Path(directory)
        folders[:] = [name for name in folders if skip is None or here / name != skip]
        for name in folders + files:
            path = here / name
            if skip is not None and path == skip:
                continue
            info = os.lstat(path)
            key = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                found[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                found[key] = ("folder", stat.S_IMODE(info.st_mode))
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[key] = ("file", stat.S_IMODE(info.st_mode), info.st_nlink, digest)
    return found


@pytest.fixture()
def sandbox(tmp_path: Path) -> Path:
    """A fake HOME with the user's files; hostile folders go inside it (``../`` from them reaches the user)."""
    home = tmp_path / "sandbox" / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    (home / "notes.txt").write_text("my notes\n")
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    (home / ".ssh" / "id_rsa").chmod(0o600)
    (home / "mydata").mkdir()
    (home / "mydata" / "test-00000-of-00001.parquet").write_bytes(b"the user's own file")
    (home / "work").mkdir()
    return home


def run(home: Path, *args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": REAL_CONFIG, "HF_HOME": REAL_HF_HOME}
    environment.update(env or {})
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd or home / "work",
        timeout=600,
        check=False,
    )


def refused(result: subprocess.CompletedProcess, *names: str) -> str:
    """The one error line of a refused command (exit 2), which names each of `names`."""
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("needlebench: error: "), result.stderr[-2000:]
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def warnings_of(result: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return [line for line in result.stderr.splitlines() if line.startswith("needlebench: warning: ")]


def git(*args: str, cwd: Path) -> None:
    """git with a throw-away identity (the attacker's commits in the tests)."""
    identity = ["-c", "user.name=attacker", "-c", "user.email=a@example.invalid", "-c", "commit.gpgSign=false"]
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def git_clone(source: Path, target: Path) -> Path:
    """`source` as a git repository, cloned to `target` (what `git clone` of a Hub dataset gives: links stay links)."""
    git("init", "-q", "-b", "main", cwd=source)
    git("add", "-A", cwd=source)
    git("commit", "-q", "-m", "dataset", cwd=source)
    subprocess.run(["git", "clone", "-q", str(source), str(target)], check=True, capture_output=True, timeout=120)
    return target
