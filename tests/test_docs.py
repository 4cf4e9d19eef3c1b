"""The README and the pages of docs/ as a newcomer reads them (issue 34).

* the README stays short: what needlebench is, the two set-up commands, the 5-minute example, where to go next,
  with a table of contents; every page of docs/ is reachable from it, and every relative link and anchor resolves;
* every ```bash block of the README and docs/ parses (``bash -n``);
* the options the pages write for a `needlebench` command are that command's options in its ``--help``, and the
  options of ``build``, ``report`` and needlebench's own options of ``eval run`` each appear in the pages, so the
  pages and ``--help`` cannot drift apart (the README once said ``--tokenizer hf:`` "is not a build option" while
  ``build --help`` listed it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The README is an entry page: past this many lines it is a manual again.
README_MAX_LINES = 150
#: Sub-commands whose --help the pages are checked against (`eval run` is lm-eval's run with needlebench's options).
SUBCOMMANDS = (
    "list", "build", "tasks", "judge", "tasks-path", "export-tasks", "show", "budget", "report", "publish", "verify",
    "eval run",
)  # fmt: skip
_HEADING = re.compile(r"^(#{1,6}) (.+)$", re.MULTILINE)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*)")


def _readme_commands():
    spec = importlib.util.spec_from_file_location("readme_commands", REPO / "scripts" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RC = _readme_commands()
PAGES = RC.pages()


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation other than - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", _text(path), flags=re.MULTILINE | re.DOTALL)
    return {_slug(title) for _level, title in _HEADING.findall(text)}


@cache
def _help(command: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    code = "import sys; from needlebench.cli import main; sys.argv[0] = 'needlebench'; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, *command.split(), "--help"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"needlebench {command} --help: {done.stderr[-2000:]}"
    return done.stdout


def _help_options(command: str) -> set[str]:
    """The options ``needlebench COMMAND --help`` defines: the first word of an option line and its aliases."""
    options = set()
    for line in _help(command).splitlines():
        line = line.strip(" │|")
        if line.startswith("-"):
            options.update(re.findall(r"(?:^|, )(--[a-z][a-z0-9_-]*)", line.split("  ")[0]))
    return options


def _subcommand(words: list[str]) -> str | None:
    """`needlebench eval run ...` -> 'eval run'; `needlebench build ...` -> 'build'; None for anything else."""
    if len(words) >= 3 and words[1] == "eval" and words[2] in ("run", "ls", "validate"):
        return f"eval {words[2]}"
    return words[1] if len(words) >= 2 and words[1] in SUBCOMMANDS else None


def test_readme_is_short_with_a_table_of_contents():
    text = _text(RC.README)
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md is {len(text.splitlines())} lines"
    sections = [title for level, title in _HEADING.findall(text) if level == "##"]
    assert sections[:1] == ["Contents"], sections
    contents = RC.section_text(text, "Contents")
    for title in sections[1:]:
        assert f"(#{_slug(title)})" in contents, f"the README's contents do not list '## {title}'"
    assert {"Set up", "A 5-minute example", "Where to go next"} <= set(sections)
    assert len(RC.setup_commands(text)) == 2 and RC.example_script(text)


def test_every_page_is_reachable_and_every_link_resolves():
    linked = set()
    for page in PAGES:
        for target in _LINK.findall(_text(page)):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            name, _hash, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            assert path.exists(), f"{page.relative_to(REPO)}: broken link {target}"
            if anchor:
                assert anchor in _anchors(path), f"{page.relative_to(REPO)}: no heading for #{anchor} in {path.name}"
            linked.add(path)
    readme_links = {(REPO / t.partition("#")[0]).resolve() for t in _LINK.findall(_text(RC.README))}
    index = (RC.DOCS / "README.md").resolve()
    for page in PAGES[1:]:
        assert page.resolve() in readme_links or page.resolve() == index, f"the README does not link {page.name}"
        assert page.resolve() in linked, f"nothing links {page.name}"


def test_every_bash_block_parses():
    assert sum(len(RC.bash_blocks(_text(page))) for page in PAGES) >= 12
    assert RC.check_blocks(PAGES) == []


def test_a_bash_block_that_does_not_parse_is_reported(tmp_path: Path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("```bash\nneedlebench build 'single_*_4k --out x\n```\n", encoding="utf-8")
    monkeypatch.setattr(RC, "REPO", tmp_path)
    (problem,) = RC.check_blocks([page])
    assert problem.startswith("page.md: bash block 1:")


def test_commands_are_read_from_blocks_and_spans():
    text = (
        "Run `needlebench list | cut -f1` or `needlebench report RESULTS --out DIR\n[--annotate counts\\|none]`.\n\n"
        "```bash\nHF_HUB_OFFLINE=1 needlebench build atc_en \\\n    --out d && needlebench tasks d --out t\n```\n"
    )
    assert RC.needlebench_commands(text) == [
        ["needlebench", "build", "atc_en", "--out", "d"],
        ["needlebench", "tasks", "d", "--out", "t"],
        ["needlebench", "list"],
        ["needlebench", "report", "RESULTS", "--out", "DIR", "[--annotate", "counts|none]"],
    ]


@pytest.mark.slow
def test_every_option_the_pages_name_is_in_help():
    checked, unknown = 0, []
    for page in PAGES:
        for words in RC.needlebench_commands(_text(page)):
            command = _subcommand(words)
            if command is None:
                continue
            known = _help_options(command)
            for option in _OPTION.findall(" ".join(words)):
                checked += 1
                if option not in known:
                    unknown.append(f"{page.relative_to(REPO)}: `needlebench {command}` has no {option}")
    assert not unknown, "\n".join(unknown)
    assert checked >= 60, checked  # the pages do name options: the parser found them


@pytest.mark.slow
def test_main_options_of_build_eval_and_report_are_documented():
    text = "\n".join(_text(page) for page in PAGES)
    documented = set(_OPTION.findall(text))
    eval_help = _help("eval run")
    own = eval_help.split("needlebench options:", 1)[1].split("\n\n", 1)[0]  # needlebench's group, before lm-eval's
    wanted = {
        "build": _help_options("build"),
        "report": _help_options("report"),
        "eval run": set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", own, re.MULTILINE)),
    }
    assert len(wanted["eval run"]) >= 8 and "--subset" in wanted["eval run"]
    missing = {command: sorted(options - documented - {"--help"}) for command, options in wanted.items()}
    assert not any(missing.values()), f"options in --help that no page documents: {missing}"


@pytest.mark.slow
def test_an_option_missing_from_help_is_caught():
    """The check reads options from --help as the pages write them: a renamed option would fail it."""
    assert "--tokenizer" in _help_options("build") and "--max-tokens" in _help_options("build")
    assert "--no-such-option" not in _help_options("build")
    assert {"--subset", "--model_args", "--output_path", "--metadata"} <= _help_options("eval run")
