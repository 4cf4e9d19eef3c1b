#!/usr/bin/env python
"""Print the shell commands of the README, so CI runs them exactly as the README writes them.

    python scripts/readme_commands.py 0     # the first command: install and build the default splits
    python scripts/readme_commands.py 1     # the second command: install the test packages and run the tests
    python scripts/readme_commands.py --example   # the 5-minute evaluation example (a bash script)

Set-up commands are the ```bash blocks of the "Set up" section, in order (one block, one command). The example
is the ```bash block that follows the marker comment :data:`EXAMPLE_MARK` (tests/test_readme_example.py runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "Set up"
_BLOCK = re.compile(r"^```(?:bash|sh)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=int, nargs="?", help="which set-up command (0 = first)")
    parser.add_argument("--example", action="store_true", help="print the 5-minute evaluation example instead")
    parser.add_argument("--readme", type=Path, default=README, help="default: %(default)s")
    args = parser.parse_args(argv)
    if (args.index is None) != args.example:
        parser.error("give a set-up command's index or --example")
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
