"""What a second, fresh red team found after the first round's fixes (issue 33), each attack through the
`needlebench` command in the sandbox (the fake HOME hashed before and after)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from support.sandbox import refused, run, snapshot

pytestmark = pytest.mark.slow


@pytest.fixture()
def essays(sandbox: Path) -> Path:
    """A public corpus the user also keeps in ~/mydata (the attacker's copy is byte-identical)."""
    text = "".join(f"Essay sentence number {i} talks about lighthouses and the sea. " for i in range(3000))
    path = sandbox / "mydata" / "essays.txt"
    path.write_text(text)
    return path


def test_a_recorded_input_name_is_a_name_never_a_path(sandbox, essays):
    """A manifest whose recipe records its haystack's file name as a path (``/home/u/.ssh/authorized_keys``,
    ``../../x``): verify refuses it in one line and makes no link anywhere (it linked the user's file there)."""
    attacker = sandbox / "work" / "att"
    attacker.mkdir()
    (attacker / "essays.txt").write_bytes(essays.read_bytes())
    ds = sandbox / "work" / "ds"
    built = run(sandbox, "build", "atc_en", "--haystack-en", str(attacker / "essays.txt"), "--out", str(ds))
    assert built.returncode == 0, built.stderr[-2000:]
    manifest = json.loads((ds / "needlebench.json").read_text())
    for name in (str(sandbox / ".ssh" / "authorized_keys"), "../../PWN"):
        manifest["recipe"]["haystack_en"]["file"] = name
        (ds / "needlebench.json").write_text(json.dumps(manifest))
        before = snapshot(sandbox, skip=sandbox / "work")
        result = run(sandbox, "verify", str(ds), "--haystack-en", str(essays))
        assert result.returncode == 2, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        assert snapshot(sandbox, skip=sandbox / "work") == before
        assert not (sandbox / ".ssh" / "authorized_keys").exists()


def test_a_hard_linked_experiment_input_is_refused(sandbox, essays):
    """An experiment folder whose haystack is a hard link to the user's file (O_NOFOLLOW does not see it): refused
    in one line, so the user's text never reaches the prompts."""
    folder = sandbox / "work" / "ex"
    folder.mkdir()
    os.link(essays, folder / "hard.txt")
    (folder / "e.yaml").write_text(
        "name: e5\nkind: single\nlanguage: en\nneedles: [{needle: 'The code is 4242.', question: 'What is the code?', "
        "answer: '4242', keyword: '4242'}]\nlengths: [1000]\ndepths: [0, 100]\nruns: 1\nhaystack: hard.txt\n"
    )
    out = sandbox / "work" / "out"
    result = run(sandbox, "build", "--experiment", str(folder / "e.yaml"), "--out", str(out))
    refused(result, "hard.txt", "hard link")
    assert not out.exists()
    (folder / "haystack").mkdir()
    os.link(essays, folder / "haystack" / "a.txt")
    (folder / "e.yaml").write_text((folder / "e.yaml").read_text().replace("hard.txt", "haystack"))
    refused(run(sandbox, "build", "--experiment", str(folder / "e.yaml"), "--out", str(out)), "a.txt", "hard link")


def _samples(folder: Path, score_of) -> None:
    rows = []
    number = 0
    for length in (1000, 2000, 4000):
        for depth in (0, 50, 100):
            number += 1
            doc = {
                "config": "single_en_4k",
                "id": f"r{number}",
                "context_length": length,
                "depth_percent": depth,
                "language": "en",
                "task": "S-RT",
            }
            rows.append(
                {
                    "doc_id": number,
                    "doc": doc,
                    "metrics": ["score"],
                    "score": score_of(number),
                    "resps": [["x"]],
                    "filtered_resps": ["x"],
                }
            )
    folder.mkdir(parents=True)
    name = "samples_needlebench_single_en_4k_2024-01-01T00-00-00.000.jsonl"
    (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    results = {
        "results": {"needlebench_single_en_4k": {"score,none": 100}},
        "config": {"model": "hf", "model_args": "pretrained=org/modelA"},
    }
    (folder / "results_2024-01-01T00-00-00.000.json").write_text(json.dumps(results))


@pytest.mark.parametrize("outlier", [1e14, -1e14, 101.0])
def test_one_out_of_range_score_never_becomes_a_headline(sandbox, outlier):
    """One row's score of 1e14 (a finite number: not caught as NaN) made its cell's mean 11,111,111,111,200: a
    score outside 0-100 is left out and counted in one warning, the headline is the other rows' mean."""
    results = sandbox / "work" / "res"
    _samples(results / "model_a", lambda number: outlier if number == 5 else 100.0)
    out = sandbox / "work" / "rep"
    result = run(sandbox, "report", str(results), "--out", str(out), "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "left out" in result.stderr
    tables = "".join(path.read_text() for path in out.glob("*.md"))
    assert "100.00" in tables
    assert "1111111" not in tables and "e+" not in tables


def test_code_spans_and_math_in_a_model_name_stay_text_in_markdown(sandbox):
    """A model name with backticks and ``$\\frac{a}{b}$``: escaped in the Markdown tables (GitHub would render a
    code span and math), as links and pipes already were."""
    results = sandbox / "work" / "res"
    _samples(results / "model_a", lambda number: 100.0)
    data = json.loads((results / "model_a" / "results_2024-01-01T00-00-00.000.json").read_text())
    data["config"]["model_args"] = "pretrained=org/`code` $\\frac{a}{b}$"
    (results / "model_a" / "results_2024-01-01T00-00-00.000.json").write_text(json.dumps(data))
    out = sandbox / "work" / "rep"
    result = run(sandbox, "report", str(results), "--out", str(out), "--no-figures")
    assert result.returncode == 0, result.stderr[-2000:]
    tables = "".join(path.read_text() for path in out.glob("*.md"))
    assert "\\`code\\`" in tables and "\\$\\\\frac" in tables
    assert "`code`" not in tables.replace("\\`", "")


@pytest.mark.parametrize("plant", ["logs/HEAD symlink", "logs/HEAD hard link", "refs/tags symlink"])
def test_publish_into_a_release_repository_with_links_in_its_git_folder(sandbox, plant):
    """Round 3: a release repository handed over with ``.git/logs/HEAD`` linked (or hard-linked) to ~/.bashrc, or
    ``.git/refs/tags`` linked to ~/mydata: git would append a reflog line there or write the tag there. Refused in
    one line before git runs; the user's files unchanged."""
    work = sandbox / "work"
    for name, seed in (("v1", "1"), ("v2", "9")):
        built = run(sandbox, "build", "atc_en", "--seed", seed, "--out", str(work / name))
        assert built.returncode == 0, built.stderr[-2000:]
    first = run(sandbox, "publish", str(work / "v1"), "--version", "1.0.0", "--to-git", str(work / "repo"))
    assert first.returncode == 0, first.stderr[-2000:]
    git = work / "repo" / ".git"
    where, kind = plant.split(" ", 1)
    target = git / where
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    if kind == "hard link":
        os.link(sandbox / ".bashrc", target)
    else:
        target.symlink_to(sandbox / (".bashrc" if where.startswith("logs") else "mydata"))
    before = snapshot(sandbox, skip=work)
    result = run(sandbox, "publish", str(work / "v2"), "--version", "1.1.0", "--to-git", str(work / "repo"))
    refused(result, where.split("/")[-1])
    assert snapshot(sandbox, skip=work) == before
