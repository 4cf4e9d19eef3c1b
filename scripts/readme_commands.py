#!/usr/bin/env python
"""Print the shell commands of the README, so CI runs them exactly as the README writes them.

    python scripts/readme_commands.py 0     # the first command: install and build the default splits
    python scripts/readme_commands.py 1     # the second command: install the test packages and run the tests
    python scripts/readme_commands.py --example   # the 5-minute evaluation example (a bash script)
    python scripts/readme_commands.py --check     # every ```bash block of README.md and docs/*.md parses (bash -n)

Set-up commands are the ```bash blocks of the "Set up" section, in order (one block, one command). The example
is the ```bash block that follows the marker comment :data:`EXAMPLE_MARK` (tests/test_readme_example.py runs it).
The other pages are docs/*.md; :func:`needlebench_commands` lists every `needlebench` command the README and those
pages write (in ```bash blocks and in `code spans`), which tests/test_docs.py checks against `--help`.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
SECTION = "Set up"
_BLOCK = re.compile(r"^```(?:bash|sh)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_ANY_BLOCK = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")  # a code span may wrap, never across a blank line
#: The comment in README.md right before the fenced block of the 5-minute evaluation example.
EXAMPLE_MARK = "<!-- the 5-minute example: tests/test_readme_example.py runs the next block verbatim -->"


def section_text(text: str, title: str = SECTION) -> str:
    """The body of the ``## title`` section of a Markdown text (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise ValueError(f"no '## {title}' section")
    return match.group(1)


def setup_commands(text: str) -> list[str]:
    """The shell commands of the set-up section, one per ```bash block, continuation lines joined."""
    commands = []
    for block in _BLOCK.findall(section_text(text)):
        command = re.sub(r"\\\n\s*", "", block).strip()
        if "\n" in command:
            raise ValueError(f"a set-up block holds more than one command: {command!r}")
        commands.append(command)
    return commands


def example_script(text: str) -> str:
    """The 5-minute evaluation example: the ```bash block right after :data:`EXAMPLE_MARK`, as written."""
    _before, mark, after = text.partition(EXAMPLE_MARK)
    match = _BLOCK.match(after.lstrip("\n"))
    if not mark or match is None:
        raise ValueError(f"no ```bash block right after the marker {EXAMPLE_MARK!r}")
    return match.group(1)


def pages() -> list[Path]:
    """README.md and the pages of docs/, in a fixed order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def bash_blocks(text: str) -> list[str]:
    """Every ```bash (or ```sh) block of a Markdown text, as written."""
    return _BLOCK.findall(text)


def _command_words(line: str) -> list[str] | None:
    """The words of one shell command if it runs `needlebench`, after any VAR=value assignments; else None."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote in prose: not a command
        return None
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    return words if words[:1] == ["needlebench"] else None


def needlebench_commands(text: str) -> list[list[str]]:
    """Every `needlebench` command a Markdown text writes, as its words: the commands of its ```bash blocks
    (continuation lines joined, split at ``&&``, ``||``, ``|`` and ``;``) and the `code spans` of its prose
    that start with ``needlebench `` (with the ``\\|`` of a table cell read as ``|``)."""
    found = []
    for block in bash_blocks(text):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            for part in re.split(r"&&|\|\||[|;]", line):
                words = _command_words(part.strip())
                if words:
                    found.append(words)
    prose = _ANY_BLOCK.sub("", text)
    for span in _SPAN.findall(prose.replace("\\|", "|")):
        span = " ".join(span.split())
        if re.match(r"needlebench [a-z-]+( |$)", span):
            command = re.split(r" \| | && |; ", span)[0]  # `needlebench list | cut -f1`: the command itself
            found.append(_command_words(command) or command.split())
    return found


def check_blocks(paths: list[Path]) -> list[str]:
    """``bash -n`` on every ```bash block of the pages: the problems found, as lines."""
    problems = []
    for path in paths:
        for number, block in enumerate(bash_blocks(path.read_text(encoding="utf-8")), 1):
            done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                problems.append(f"{path.relative_to(REPO)}: bash block {number}: {done.stderr.strip()}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=int, nargs="?", help="which set-up command (0 = first)")
    parser.add_argument("--example", action="store_true", help="print the 5-minute evaluation example instead")
    parser.add_argument(
        "--check", action="store_true", help="check that every bash block of the README and docs/ parses"
    )
    parser.add_argument("--readme", type=Path, default=README, help="default: %(default)s")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_blocks(pages())
        print("\n".join(problems) or f"every bash block of {len(pages())} pages parses")
        return 1 if problems else 0
    if (args.index is None) != args.example:
        parser.error("give a set-up command's index, --example or --check")
    try:
        text = args.readme.read_text(encoding="utf-8")
        if args.example:
            print(example_script(text), end="")
            return 0
        commands = setup_commands(text)
        print(commands[args.index])
    except (OSError, ValueError, IndexError) as error:
        print(f"readme_commands: {args.readme}: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
