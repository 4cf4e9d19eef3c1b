#!/usr/bin/env python
"""Generate the lm-eval task folder ``harness_tasks/needlebench`` from the config registry.

Writes one ``<config>.yaml`` per config of ``needlebench.tasks.grid.registry()``, the base templates they include
(``_default_<family>_template_yaml``) and the group files (``_needlebench_<family|size>.yaml``). Hand-written
files (``utils.py``, ``README.md``) are left alone; generated files that no longer correspond to a config are
removed.

    python scripts/gen_harness_tasks.py            # write the files
    python scripts/gen_harness_tasks.py --check    # exit 1 if the committed files are out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from needlebench.evaluation.harness.tasks import GENERATED_NOTE, task_files

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "harness_tasks" / "needlebench"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="task folder (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when files differ")
    return parser


def stale_files(out: Path, expected: dict[str, str]) -> list[Path]:
    """Generated files in ``out`` (they start with the generated note) that are no longer produced."""
    if not out.is_dir():
        return []
    stale = []
    for path in sorted(out.iterdir()):
        if path.name in expected or not path.is_file():
            continue
        if path.name.endswith((".yaml", "_yaml")) and path.read_text(encoding="utf-8").startswith(GENERATED_NOTE):
            stale.append(path)
    return stale


def differing_files(out: Path, expected: dict[str, str]) -> list[str]:
    """Names of expected files that are missing or differ on disk, plus stale generated files."""
    names = [name for name, text in expected.items() if not _same(out / name, text)]
    return names + [path.name for path in stale_files(out, expected)]


def _same(path: Path, text: str) -> bool:
    return path.is_file() and path.read_text(encoding="utf-8") == text


def write_files(out: Path, expected: dict[str, str]) -> int:
    """Write changed files, delete stale ones; return the number of files touched."""
    out.mkdir(parents=True, exist_ok=True)
    touched = 0
    for name, text in expected.items():
        path = out / name
        if not _same(path, text):
            path.write_text(text, encoding="utf-8")
            touched += 1
    for path in stale_files(out, expected):
        path.unlink()
        touched += 1
    return touched


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    expected = task_files()
    if args.check:
        differing = differing_files(args.out, expected)
        if differing:
            shown = ", ".join(differing[:10]) + (" ..." if len(differing) > 10 else "")
            print(f"{len(differing)} file(s) out of date in {args.out}: {shown}", file=sys.stderr)
            print("run: python scripts/gen_harness_tasks.py", file=sys.stderr)
            return 1
        print(f"{len(expected)} generated files up to date in {args.out}")
        return 0
    touched = write_files(args.out, expected)
    print(f"wrote {touched} file(s); {len(expected)} generated files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
