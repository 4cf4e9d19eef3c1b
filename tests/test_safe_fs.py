"""The file-system layer every write into a folder from someone else goes through (needlebench/safe_fs.py): a link
planted at any name, or at any folder on the way, is replaced or refused, never followed."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder, parts_of, private_folder, write_file


@pytest.fixture()
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text("the user's file\n")
    return path


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path: Path, victim: Path):
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "needlebench.json").symlink_to(victim)
    with Folder.open(folder) as handle:
        handle.write_text("needlebench.json", "{}\n")
    assert victim.read_text() == "the user's file\n"
    assert not (folder / "needlebench.json").is_symlink()
    assert (folder / "needlebench.json").read_text() == "{}\n"
    assert stat.S_IMODE(os.lstat(folder / "needlebench.json").st_mode) == 0o644
    assert sorted(os.listdir(folder)) == ["needlebench.json"]  # no temporary file left


def test_a_link_on_the_way_is_refused(tmp_path: Path):
    elsewhere = tmp_path / "mydata"
    elsewhere.mkdir()
    folder = tmp_path / "shared"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "atc_en").symlink_to(elsewhere)
    with Folder.open(folder) as handle:
        with pytest.raises(NeedlebenchError, match="never follows a link"):
            handle.write_bytes("data/atc_en/x.parquet", b"x", create_parents=True)
        with pytest.raises(NeedlebenchError, match="never follows a link"):
            handle.sub("data/atc_en")
        with pytest.raises(NeedlebenchError):
            handle.unlink("data/atc_en/x.parquet")
    assert os.listdir(elsewhere) == []


def test_an_open_folder_stays_the_folder_that_was_checked(tmp_path: Path):
    """A swap of a folder for a link after it was opened does not redirect what is done through the descriptor."""
    elsewhere = tmp_path / "mydata"
    elsewhere.mkdir()
    (elsewhere / "keep.parquet").write_bytes(b"mine")
    folder = tmp_path / "shared"
    (folder / "data" / "atc_en").mkdir(parents=True)
    (folder / "data" / "atc_en" / "keep.parquet").write_bytes(b"theirs")
    with Folder.open(folder) as root, root.sub("data/atc_en") as config:
        os.rename(folder / "data" / "atc_en", folder / "data" / "moved")
        (folder / "data" / "atc_en").symlink_to(elsewhere)
        config.unlink("keep.parquet")
        config.write_bytes("new.parquet", b"new")
    assert (elsewhere / "keep.parquet").read_bytes() == b"mine"
    assert os.listdir(elsewhere) == ["keep.parquet"]
    assert sorted(os.listdir(folder / "data" / "moved")) == ["new.parquet"]


@pytest.mark.parametrize("kind", ["fifo", "link", "folder"])
def test_reads_take_regular_files_only(tmp_path: Path, victim: Path, kind: str):
    folder = tmp_path / "shared"
    folder.mkdir()
    if kind == "fifo":
        os.mkfifo(folder / "x")
    elif kind == "link":
        (folder / "x").symlink_to(victim)
    else:
        (folder / "x").mkdir()
    result: list = []

    def read() -> None:
        with Folder.open(folder) as handle:
            try:
                handle.read_bytes("x")
            except NeedlebenchError as error:
                result.append(str(error))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert len(result) == 1 and "x" in result[0]


def test_size_limit(tmp_path: Path):
    (tmp_path / "big").write_bytes(b"x" * 100)
    with Folder.open(tmp_path) as handle:
        assert handle.read_bytes("big", limit=100) == b"x" * 100
        with pytest.raises(NeedlebenchError, match="at most 99"):
            handle.read_bytes("big", limit=99)


def test_append_refuses_a_link(tmp_path: Path, victim: Path):
    (tmp_path / "cache.jsonl").symlink_to(victim)
    with Folder.open(tmp_path) as handle:
        with pytest.raises(NeedlebenchError, match="symbolic link"):
            handle.append_bytes("cache.jsonl", b"row\n")
        handle.append_bytes("other.jsonl", b"a\n")
        handle.append_bytes("other.jsonl", b"b\n")
    assert victim.read_text() == "the user's file\n"
    assert (tmp_path / "other.jsonl").read_bytes() == b"a\nb\n"
    assert stat.S_IMODE(os.lstat(tmp_path / "other.jsonl").st_mode) == 0o600


def test_rmtree_removes_a_link_not_its_target(tmp_path: Path, victim: Path):
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "link").symlink_to(victim.parent)
    (tmp_path / "tree" / "top").symlink_to(victim)
    with Folder.open(tmp_path) as handle:
        handle.rmtree("tree")
        handle.rmtree("absent")
    assert not (tmp_path / "tree").exists()
    assert victim.read_text() == "the user's file\n"


def test_place_from_links_and_replaces(tmp_path: Path, victim: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"data")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "f").symlink_to(victim)
    with Folder.open(tmp_path) as root, root.sub("a") as a, root.sub("b") as b:
        b.place_from(a, "f", "f")
        b.place_from(a, "f", "deep/g")
    assert victim.read_text() == "the user's file\n"
    assert (tmp_path / "b" / "f").read_bytes() == b"data"
    assert os.path.samefile(tmp_path / "a" / "f", tmp_path / "b" / "deep" / "g")


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a\\b", "a\0b"])
def test_bad_names_are_one_line_errors(name: str):
    with pytest.raises(NeedlebenchError) as error:
        parts_of(name, "the manifest")
    assert "\n" not in str(error.value)


def test_private_folders_ignore_the_umask(tmp_path: Path):
    old = os.umask(0)
    try:
        with private_folder(tmp_path / "cache" / "inner") as handle:
            handle.write_bytes("f", b"x", mode=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "cache").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "cache" / "inner").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "cache" / "inner" / "f").st_mode) == 0o600
    os.chmod(tmp_path / "cache" / "inner", 0o777)
    with pytest.raises(NeedlebenchError, match="writable by others"):
        private_folder(tmp_path / "cache" / "inner")


def test_write_file_at_a_users_path(tmp_path: Path, victim: Path):
    (tmp_path / "out.md").symlink_to(victim)
    write_file(tmp_path / "out.md", "report\n")
    assert victim.read_text() == "the user's file\n"
    assert (tmp_path / "out.md").read_text() == "report\n"


def test_a_link_on_the_typed_path_below_home_or_the_current_folder_is_refused(tmp_path: Path, monkeypatch):
    """``--out shared/sub/report`` where ``shared/sub`` is a link a shared folder carries: refused, naming the link
    and the real path; a link that is an ancestor of the current folder (the user's own layout) is followed."""
    home = tmp_path / "home"
    (home / "mydata").mkdir(parents=True)
    shared = home / "work" / "shared"
    shared.mkdir(parents=True)
    (shared / "sub").symlink_to(home / "mydata")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home / "work")
    for typed in ("shared/sub/report", str(shared / "sub" / "report"), "shared/sub"):
        with pytest.raises(NeedlebenchError, match="symbolic link .*shared/sub") as error:
            Folder.open(typed, create=True)
        assert str(home / "mydata") in str(error.value)
    assert os.listdir(home / "mydata") == []
    # the user's own layout: the current folder reached through a link above it
    (tmp_path / "alias").symlink_to(home)
    monkeypatch.chdir(tmp_path / "alias" / "work")
    monkeypatch.setenv("PWD", str(tmp_path / "alias" / "work"))
    with Folder.open(tmp_path / "alias" / "work" / "out", create=True) as handle:
        handle.write_text("x", "y")
    assert (home / "work" / "out" / "x").read_text() == "y"


def test_new_files_get_the_mode_less_the_umask(tmp_path: Path):
    old = os.umask(0o077)
    try:
        with Folder.open(tmp_path) as handle:
            handle.write_text("report.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(tmp_path / "report.md").st_mode) == 0o600


def test_append_refuses_a_hard_link(tmp_path: Path, victim: Path):
    """A name swapped for a hard link to a file elsewhere (it passes O_NOFOLLOW and S_ISREG) is not appended to."""
    (tmp_path / "cache.jsonl").hardlink_to(victim)
    with Folder.open(tmp_path) as handle, pytest.raises(NeedlebenchError, match="hard link"):
        handle.append_bytes("cache.jsonl", b"row\n")
    assert victim.read_text() == "the user's file\n"
