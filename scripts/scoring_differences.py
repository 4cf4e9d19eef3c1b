#!/usr/bin/env python
"""Measure how often the default metrics and their ``*_reference`` twins disagree, per class of difference.

A deterministic mixed-style set of model outputs is generated for every family (S-RT, M-RS v2 for the reasoning
blocks; v1 multiple-choice and open-ended ATC; Counting-Stars), each output tagged with the one style it was written
in, and scored by the lm-eval hooks (``needlebench.evaluation.harness.tasks``, the layer ``lm_eval`` runs) for the
default
metric and for its ``*_reference`` twin. A row "changed" when the two scores differ; for ATC an item (its four
rotations) changed when CircularEval's verdict (all four right) differs. The table gives, per style, how many rows
(items) of that style there are, how many changed, and that as a share of the style's rows and of the family's
whole set (every style has the same number of rows, so the family's share is the sum over its styles).

    python scripts/scoring_differences.py [--rows 400] [--seed 0] [--think-unclosed keep|empty] [--markdown]

Half of the answers are right and half wrong (a random other option, name or count), so a difference that
only matters for right answers (or only for wrong ones) shows in half of its rows at most.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable

from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.scoring.thinking import ThinkPolicy, set_policy

NEEDLES = [
    ("The secret password of the Pellanlin Order is Brelvane Chalice.", "Brelvane Chalice"),
    ("Hidden on Emerald Island is the legendary Stardust Shard.", "Stardust Shard"),
    ("The lost city of Rynisdras was founded by Duchess Pellwen.", "Duchess Pellwen"),
]
NAMES_EN = ["Carol Adams", "David House", "Bob Smith", "Alice Brown", "Eve Turner", "Frank Moore", "Grace Lee"]
NAMES_ZH = ["张伟", "李娜", "王芳", "刘洋", "陈静", "杨敏", "赵磊"]
ROTATIONS = ("ABCD", "BCDA", "CDAB", "DABC")
FULLWIDTH = {letter: chr(ord("Ａ") + ord(letter) - ord("A")) for letter in "ABCD"}


# --------------------------------------------------------------------------------------------- think styles


def think_styles(answer: str, wrong: str, rng: random.Random) -> dict[str, str]:
    """The reasoning-block styles of an answer (``answer`` the model's final answer, ``wrong`` another one)."""
    return {
        "no reasoning block": answer,
        "closed block, answer after it": f"<think>Let me look for it. Maybe {wrong}?</think>\n{answer}",
        "unclosed block (ran out of tokens)": f"<think>Let me look for it. I recall {answer} so the answer",
        "text before and between blocks": f"{answer} <think>checking again</think> {wrong}",
    }


# --------------------------------------------------------------------------------------------- families


def srt_rows(count: int, rng: random.Random) -> list[tuple[str, str, dict, str]]:
    """(family, style, row, output) for S-RT v1."""
    rows = []
    for index in range(count):
        needle, keyword = NEEDLES[index % len(NEEDLES)]
        other = NEEDLES[(index + 1) % len(NEEDLES)][0]
        answer = needle if rng.random() < 0.5 else other
        doc = {"needles": [needle], "keywords": [keyword]}
        for style, output in think_styles(answer, other if answer == needle else needle, rng).items():
            rows.append(("S-RT", style, doc, output))
    return rows


def v2_mrs_rows(count: int, rng: random.Random) -> list[tuple[str, str, dict, str]]:
    """(family, style, row, output) for v2 M-RS (``\\boxed{}`` exact match)."""
    rows = []
    for _ in range(count):
        gold, other = rng.sample(NAMES_EN, 2)
        answer = gold if rng.random() < 0.5 else other
        doc = {"answer": gold}
        final, wrong = f"The eldest is \\boxed{{{answer}}}.", f"\\boxed{{{other if answer == gold else gold}}}"
        for style, output in think_styles(final, wrong, rng).items():
            rows.append(("M-RS v2", style, doc, output))
    return rows


def _atc_output(style: str, chosen: str, other: str, name: str, language: str) -> str:
    zh = language == "zh"
    if style == "usual form (Answer: X / 回答: X)":
        return f"回答: {chosen}" if zh else f"Answer: {chosen}"
    if style == "reasoning form (The answer is: X)":
        return f"根据关系链推理，所以答案是：{chosen}" if zh else f"Tracing the chain upwards. The answer is: {chosen}"
    if style == "several answer statements":
        if zh:
            return f"答案是{other}。不对，重新检查一下，答案是{chosen}。"
        return f"Answer: {other}. On reflection the answer is {chosen}, the eldest in the chain."
    if style == "a name without a letter":
        return f"最年长的亲人是{name}。" if zh else f"The eldest relative is {name}."
    if style == "fullwidth letter":
        return f"回答：{FULLWIDTH[chosen]}" if zh else f"Answer: {FULLWIDTH[chosen]}"
    if style == "lowercase or glued letter":
        return f"回答: {chosen.lower()}" if zh else f"Answer: {chosen.lower()}"
    if style == "unclosed reasoning block":
        return f"<think>从关系链看，答案是{chosen}" if zh else f"<think>Following the chain, the answer is {chosen}"
    raise ValueError(style)


ATC_STYLES = (
    "usual form (Answer: X / 回答: X)",
    "reasoning form (The answer is: X)",
    "several answer statements",
    "a name without a letter",
    "fullwidth letter",
    "lowercase or glued letter",
    "unclosed reasoning block",
)


def atc_items(count: int, rng: random.Random, language: str) -> list[tuple[str, str, list[dict], list[str]]]:
    """(family, style, 4 rotation rows, 4 outputs) per circular item: the model is right on a rotation with
    probability 0.8 (an item is right on all four in about 40% of cases)."""
    names = NAMES_ZH if language == "zh" else NAMES_EN
    items = []
    for index in range(count):
        for style in ATC_STYLES:
            base = rng.sample(names, 4)  # base[0] is the eldest
            rows, outputs = [], []
            for rotation in ROTATIONS:
                options = [base["ABCD".index(letter)] for letter in rotation]
                letter = "ABCD"[options.index(base[0])]
                chosen = letter if rng.random() < 0.8 else rng.choice([x for x in "ABCD" if x != letter])
                other = rng.choice([x for x in "ABCD" if x != chosen])
                rows.append(
                    {
                        "options": options,
                        "answer_letter": letter,
                        "item_id": f"{language}-{index}-{style}",
                        "rotation": rotation,
                        "language": language,
                    }
                )
                outputs.append(_atc_output(style, chosen, other, options["ABCD".index(chosen)], language))
            items.append((f"ATC {language.upper()}", style, rows, outputs))
    return items


OPEN_STYLES = ("final answer sentence", "the name mentioned, another final answer", "a misspelt name")


def open_atc_rows(count: int, rng: random.Random) -> list[tuple[str, str, dict, str]]:
    """(family, style, row, output) for v1 open-ended ATC (default: the final name; reference: the S-RT
    evaluator with the eldest name as needle and keyword)."""
    rows = []
    for _ in range(count):
        gold, other = rng.sample(NAMES_EN, 2)
        answer = gold if rng.random() < 0.5 else other
        doc = {"answer": gold}
        outputs = {
            "final answer sentence": f"The eldest relative is {answer}.",
            "the name mentioned, another final answer": f"Not {gold}: the eldest relative is {other}.",
            "a misspelt name": f"The eldest relative is {answer[:-1]}.",
        }
        rows += [("ATC open EN", style, doc, output) for style, output in outputs.items()]
    return rows


STAR_STYLES = (
    "plain JSON",
    "JSON in a code fence",
    "prose around the JSON",
    "trailing comma",
    "single quotes",
    "the other language's key",
    "nested object",
    "fullwidth digits",
    "booleans in the list",
)


def _star_output(style: str, key: str, other_key: str, counts: list) -> str:
    body = ", ".join(str(value) for value in counts)
    if style == "plain JSON":
        return json.dumps({key: counts}, ensure_ascii=False)
    if style == "JSON in a code fence":
        return "```json\n" + json.dumps({key: counts}, ensure_ascii=False) + "\n```"
    if style == "prose around the JSON":
        return "Here are the counts: " + json.dumps({key: counts}, ensure_ascii=False) + " I hope this helps."
    if style == "trailing comma":
        return '{"' + key + '": [' + body + ",]}"
    if style == "single quotes":
        return "{'" + key + "': [" + body + "]}"
    if style == "the other language's key":
        return json.dumps({other_key: counts}, ensure_ascii=False)
    if style == "nested object":
        return json.dumps({"answer": {key: counts}}, ensure_ascii=False)
    if style == "fullwidth digits":
        wide = str.maketrans("0123456789", "０１２３４５６７８９")
        return '{"' + key + '": [' + body.translate(wide) + "]}"
    if style == "booleans in the list":
        return json.dumps({key: [*counts[:-1], True]}, ensure_ascii=False)
    raise ValueError(style)


def star_rows(count: int, rng: random.Random, language: str) -> list[tuple[str, str, dict, str]]:
    """(family, style, row, output): 32 distinct counts from 1..128 (the default build's pool), the model right per
    star with probability 0.7 (else the count + 1); "booleans" puts ``true`` in place of the last count."""
    key, other_key = ("小企鹅", "little_penguin") if language == "zh" else ("little_penguin", "小企鹅")
    rows = []
    for _ in range(count):
        for style in STAR_STYLES:
            stars = rng.sample(range(1, 129), 32)
            predicted = [value if rng.random() < 0.7 else value + 1 for value in stars]
            doc = {"star_counts": stars, "wrong_counts": [], "task_variant": "acquisition", "language": language}
            rows.append(
                (f"Counting-Stars {language.upper()}", style, doc, _star_output(style, key, other_key, predicted))
            )
    return rows


# --------------------------------------------------------------------------------------------- counting


#: The ``config`` of the generated rows: the hooks score them under the policy recorded for it.
CONFIG = "scoring_differences"


def measure(rows: int, seed: int, unclosed: str = "keep") -> list[tuple[str, str, int, int]]:
    """(family, style, rows or items of that style, how many changed), the default metrics scoring an unclosed
    reasoning block under ``unclosed`` (``keep`` or ``empty``, ``--think-unclosed`` of ``needlebench eval``)."""
    set_policy(CONFIG, ThinkPolicy(unclosed=unclosed))

    rng = random.Random(seed)
    tally: dict[tuple[str, str], Counter] = defaultdict(Counter)
    hooks: dict[str, tuple[Callable, str]] = {
        "S-RT": (harness.process_single, "score"),
        "M-RS v2": (harness.process_multi_reasoning_v2, "exact"),
        "ATC open EN": (harness.process_atc_open, "score"),
    }
    for family, style, doc, output in srt_rows(rows, rng) + v2_mrs_rows(rows, rng) + open_atc_rows(rows, rng):
        hook, metric = hooks[family]
        result = hook({**doc, "config": CONFIG}, [output])
        tally[(family, style)].update(total=1, changed=result[metric] != result[f"{metric}_reference"])
    for language in ("en", "zh"):
        for family, style, docs, outputs in atc_items(rows // 4 or 1, rng, language):
            results = [harness.process_atc({**doc, "config": CONFIG}, [output]) for doc, output in zip(docs, outputs)]
            default = all(result["perf_4"][2] for result in results)
            reference = all(result["perf_4_reference"][2] for result in results)
            tally[(family, style)].update(total=1, changed=default != reference)
            tally[(family + " rows", style)].update(
                total=len(results), changed=sum(r["acc"] != r["acc_reference"] for r in results)
            )
        for family, style, doc, output in star_rows(rows, rng, language):
            result = harness.process_counting_stars({**doc, "config": CONFIG}, [output])
            tally[(family, style)].update(total=1, changed=result["star_score"] != result["star_score_reference"])
    return [(family, style, counts["total"], counts["changed"]) for (family, style), counts in tally.items()]


def format_table(results: list[tuple[str, str, int, int]], markdown: bool) -> str:
    totals: Counter = Counter()
    for family, _style, total, _changed in results:
        totals[family] += total
    header = ("family", "style", "rows", "changed", "% of style", "% of family set")
    lines = []
    for family, style, total, changed in results:
        lines.append(
            (
                family,
                style,
                str(total),
                str(changed),
                f"{100 * changed / total:.1f}",
                f"{100 * changed / totals[family]:.1f}",
            )
        )
    for family in totals:
        changed = sum(c for f, _s, _t, c in results if f == family)
        lines.append(
            (family, "(all styles)", str(totals[family]), str(changed), "", f"{100 * changed / totals[family]:.1f}")
        )
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in [header, *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400, help="outputs per style and family (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--think-unclosed", choices=("keep", "empty"), default="keep")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    if args.rows < 4:
        parser.error(f"--rows {args.rows} is below 4; allowed: 4 or more")
    print(format_table(measure(args.rows, args.seed, args.think_unclosed), args.markdown))


if __name__ == "__main__":
    main()
