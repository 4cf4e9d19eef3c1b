"""Check needle depths of a built dataset with an independent count: re-encode with tiktoken.

    python scripts/check_depths.py DATASET_DIR [CONFIG_GLOB...] [-v]

For every row of the haystack families and Counting-Stars (default mode) it takes the context out of the prompt
(the prompt frame of the row's family and language), removes the needles and the whitespace each was joined
with, re-encodes the haystack with tiktoken cl100k_base, and measures each needle's depth as
(tokens of the haystack before the needle) / (tokens of the haystack). A needle is within tolerance when it is
within 1 point of its requested depth, or within 3 tokens where 1 point is less than 3 tokens. Prints per
config the rows, the share of needles outside tolerance, the worst distance and the boundary kinds.
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.counting_stars import question_separator
from needlebench.tasks.prompts import frame_parts


def strip_needles(context: str, needles: list[str]) -> tuple[str, list[int]]:
    """The haystack (needles and their joining whitespace removed) and, per needle occurrence in order, the
    haystack char offset where it was."""
    pattern = "|".join(re.escape(n) for n in sorted(set(needles), key=len, reverse=True))
    parts, offsets, cursor, length = [], [], 0, 0
    for match in re.finditer(pattern, context):
        piece = context[cursor : match.start()]
        stop = match.end()
        if match.start() == 0:
            stop += 1  # the opening needle is followed by "\n"
        elif piece and piece[-1] in " \n\t":
            piece = piece[:-1]  # joined with a copy of the whitespace after it (the closing needle: "\n" before)
        parts.append(piece)
        length += len(piece)
        offsets.append(length)
        cursor = stop
    parts.append(context[cursor:])
    return "".join(parts), offsets


def context_of(row: dict) -> str:
    if row["task"] == "Counting-Stars":
        tail = question_separator() + row["question"]
        return row["prompt"][: -len(tail)]
    family = {"S-RT": "single", "M-RT": "multi_retrieval", "M-RS": "multi_reasoning"}[row["task"]]
    before, after = frame_parts(family, row["language"], row["question"], "end")
    assert row["prompt"].startswith(before) and row["prompt"].endswith(after), row["id"]
    return row["prompt"][len(before) : len(row["prompt"]) - len(after)]


def check(folder: Path, patterns: list[str], verbose: bool = False) -> int:
    encoding = get_tokenizer().encoding  # tiktoken's cl100k_base, from the package's offline copy of the BPE file
    manifest = json.loads((folder / "needlebench.json").read_text())
    bad_total = 0
    for config in manifest["configs"]:
        if patterns and not any(fnmatch.fnmatch(config, p) for p in patterns):
            continue
        needles = outside = rows = 0
        worst = 0.0
        kinds: Counter = Counter()
        for path in sorted((folder / "data" / config).glob("*.parquet")):
            table = pq.read_table(path)
            if "needle_boundaries" not in table.column_names:
                break
            for row in table.to_pylist():
                if row["compat"]:
                    continue
                rows += 1
                context = context_of(row)
                haystack, offsets = strip_needles(context, row["needles"])
                total = len(encoding.encode_ordinary(haystack))
                order = sorted(range(len(row["needles"])), key=lambda i: row["needle_depths"][i])
                for rank, i in enumerate(order):
                    before = len(encoding.encode_ordinary(haystack[: offsets[rank]]))
                    distance = (
                        abs(before - total * row["requested_depths"][i] / 100)
                        if "requested_depths" in row
                        else abs(before - total * (i + 1) / len(row["needles"]))
                    )
                    tolerance = max(total / 100, 3)
                    needles += 1
                    if distance > tolerance + 1e-9:
                        outside += 1
                        if verbose:
                            print(
                                f"  {row['id']} needle {i}: {before}/{total} tokens, {distance:.2f} from the "
                                f"requested depth (tolerance {tolerance:.2f})"
                            )
                    worst = max(worst, 100 * distance / total)
                kinds.update(row["needle_boundaries"])
        if not rows:
            continue
        bad_total += outside
        shares = ", ".join(f"{k} {100 * v / sum(kinds.values()):.1f}%" for k, v in kinds.most_common())
        print(
            f"{config}: {rows} rows, {needles} needles, {outside} outside tolerance, worst {worst:.2f} points; {shares}"
        )
    return 1 if bad_total else 0


if __name__ == "__main__":
    arguments = [a for a in sys.argv[2:] if a != "-v"]
    sys.exit(check(Path(sys.argv[1]), arguments, verbose="-v" in sys.argv[2:]))
