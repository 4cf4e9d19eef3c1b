"""Lengths in the model's own tokens: `--tokenizer hf:PATH_OR_NAME` (SmolLM2's byte-level BPE, and a Metaspace BPE
that takes the whole-prompt fallback) counts every length, buffer and depth in that tokenizer, exactly."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from needlebench.sources.hf_tokenizer import splice_safe
from needlebench.sources.tokenized import _cache_key
from needlebench.sources.tokenizer import get_tokenizer
from support.smollm import smollm_dir

LITERALS = [
    " The ruler of the Zorvath star system is Queen Miri.",
    "\nHidden on Emerald Island is the legendary Stardust Shard 42.\n",
    "翡翠岛上藏着传说中的星尘碎片。",
    "\n",
    "\n\nNow, the question is: What is it?",
    "用户现在给你的文档是",
    " ",
    "  \n\n  ",
    "<|im_end|>",
]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows_of(folder: Path, config: str) -> list[dict]:
    files = sorted((folder / "data" / config).glob("*.parquet"))
    return [row for file in files for row in pq.read_table(file).to_pylist()]


@pytest.fixture(scope="module")
def smollm() -> Path:
    return smollm_dir()


@pytest.fixture(scope="module")
def smollm_tok(smollm):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm), local_files_only=True)


@pytest.fixture(scope="module")
def haystacks(tmp_path_factory) -> dict[str, Path]:
    """Slices of the default haystacks as local files (a small corpus tokenises in a moment in any tokenizer)."""
    from needlebench.sources.corpus import load_corpus

    folder = tmp_path_factory.mktemp("haystacks")
    files = {}
    for language, chars in (("en", 400_000), ("zh", 120_000)):
        files[language] = folder / f"{language}_slice.txt"
        files[language].write_text(load_corpus(None, language).text[:chars], encoding="utf-8")
    return files


def build_experiment_file(tmp_path: Path, experiment: dict, out: Path, tokenizer: str | None = None) -> dict:
    from needlebench.dataset.experiment import build_experiment

    path = tmp_path / f"{experiment['name']}.yaml"
    path.write_text(yaml.safe_dump(experiment, allow_unicode=True), encoding="utf-8")
    # the haystack and tokenizer folders lie outside the file's folder: allowed as `--allow-path` would
    allowed = [experiment["haystack"]] if "haystack" in experiment else []
    if str(experiment.get("tokenizer", "")).startswith("hf:"):
        allowed.append((tmp_path / experiment["tokenizer"][3:]).resolve())
    return build_experiment(path, out, tokenizer=tokenizer, progress=False, allowed_paths=tuple(allowed))[1]


@pytest.fixture(scope="module")
def metaspace_dir(tmp_path_factory) -> Path:
    """A small BPE tokenizer with a Metaspace pre-tokenizer (SentencePiece style, prefix space on the first piece):
    not a regex split of byte-level BPE, so counts take the whole-prompt fallback."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from needlebench.sources.corpus import load_corpus

    folder = tmp_path_factory.mktemp("metaspace")
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
    text = load_corpus(None, "en").text[:300_000]
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator(text.split("\n"), trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>"}), encoding="utf-8"
    )
    return folder


def _needle_points(context: str, needles: list[str]) -> tuple[str, list[int]]:
    """The haystack of a context (every needle and the whitespace it was joined with removed) and, per needle, the
    haystack offset of its insertion point (placement's layout: `needle\\n` first, `\\n needle` last, else the
    needle joined before the point's own whitespace character, or directly in Chinese)."""
    spans = []
    for needle in needles:
        if context.startswith(needle + "\n"):
            spans.append((0, len(needle) + 1, "start"))
            continue
        if context.endswith("\n" + needle):
            spans.append((len(context) - len(needle) - 1, len(needle) + 1, "end"))
            continue
        at = context.index(needle)
        if at > 0 and context[at - 1] in " \n\t":
            spans.append((at - 1, len(needle) + 1, "inside"))
        else:
            spans.append((at, len(needle), "inside"))
    order = sorted(range(len(needles)), key=lambda i: spans[i][0])
    haystack, cursor, removed, points = [], 0, 0, [0] * len(needles)
    for i in order:
        start, length, kind = spans[i]
        haystack.append(context[cursor:start])
        points[i] = start - removed if kind != "end" else -1
        cursor, removed = start + length, removed + length
    haystack.append(context[cursor:])
    text = "".join(haystack)
    return text, [len(text) if p == -1 else p for p in points]


def check_rows(rows: list[dict], count, frame_of, recorded: str) -> None:
    """What the cl100k builds guarantee, measured in `count`'s tokens: exact prompt and context lengths, every
    needle within 1 point (at least 3 tokens) of its requested depth, depths as recorded."""
    assert rows
    for row in rows:
        assert row["tokenizer"] == recorded
        assert row["prompt_tokens"] == count(row["prompt"]), row["id"]
        before, after = frame_of(row)
        assert row["prompt"].startswith(before) and row["prompt"].endswith(after)
        context = row["prompt"][len(before) : len(row["prompt"]) - len(after)]
        assert count(context) == row["haystack_tokens"] == row["context_length"] - row["buffer"], row["id"]
        haystack, points = _needle_points(context, row["needles"])
        total = count(haystack)
        for point, requested, recorded_depth in zip(points, row["requested_depths"], row["needle_depths"]):
            before_tokens = count(haystack[:point])
            assert abs(before_tokens - total * requested / 100) <= max(total / 100, 3) + 1e-9, row["id"]
            assert recorded_depth == round(100 * before_tokens / total, 4), row["id"]


def builtin_frame(row: dict) -> tuple[str, str]:
    from needlebench.tasks.prompts import frame_parts

    family = {"S-RT": "single", "M-RT": "multi_retrieval", "M-RS": "multi_reasoning"}[row["task"]]
    return frame_parts(family, row["language"], row["question"])


def tokenizer_sha(folder: Path) -> str:
    return hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()


# ---- the interface -------------------------------------------------------------------------------------------


def test_recorded_name_has_no_path_and_reloads_by_hash(smollm):
    spec = f"hf:{smollm}"
    tokenizer = get_tokenizer(spec)
    assert tokenizer.name == f"hf:{smollm.name}@sha256:{tokenizer_sha(smollm)}"
    assert str(smollm.parent) not in tokenizer.name
    assert tokenizer.splices  # ByteLevel(use_regex=True), BPE, no normaliser
    again = get_tokenizer(tokenizer.name)
    assert again.name == tokenizer.name and again.count("Hello world 12345") == tokenizer.count("Hello world 12345")


def test_splice_safe_accepts_regex_byte_level_bpe_only():
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
    llama3 = {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": r"(?i:'s|'t)|\p{L}+|\p{N}{1,3}|\s+(?!\S)|\s+"},
                "behavior": "Isolated",
                "invert": False,
            },
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
        ],
    }
    digits = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    bpe = {"type": "BPE"}
    assert splice_safe({"normalizer": None, "pre_tokenizer": byte_level, "model": bpe})
    assert splice_safe({"normalizer": None, "pre_tokenizer": llama3, "model": bpe})
    assert splice_safe({"normalizer": None, "pre_tokenizer": digits, "model": bpe})
    assert not splice_safe({"normalizer": {"type": "NFC"}, "pre_tokenizer": llama3, "model": bpe})
    assert not splice_safe(
        {"normalizer": None, "pre_tokenizer": {**byte_level, "add_prefix_space": True}, "model": bpe}
    )
    assert not splice_safe({"normalizer": None, "pre_tokenizer": {**byte_level, "use_regex": False}, "model": bpe})
    assert not splice_safe({"normalizer": None, "pre_tokenizer": {"type": "Metaspace"}, "model": bpe})
    assert not splice_safe({"normalizer": None, "pre_tokenizer": byte_level, "model": {"type": "WordPiece"}})


@pytest.mark.parametrize("language", ["en", "zh"])
def test_piece_ends_are_the_pre_tokenizer_pieces(smollm, language):
    from needlebench.sources.corpus import load_corpus

    tokenizer = get_tokenizer(f"hf:{smollm}")
    prefix = load_corpus(None, language).text[50_000:70_000] + " 12345"
    text = prefix + " <|im_end|> x"
    tokens, ends = tokenizer.tokens_and_piece_ends(text)
    assert tokens.tolist() == tokenizer.encode(text)
    pieces = [end for _, (_, end) in tokenizer.backend.pre_tokenizer.pre_tokenize_str(prefix)]
    assert [int(e) for e in ends if e <= len(prefix)] == pieces
    # an added token in the text is a piece of its own, as the tokenizer splits it out before pre-tokenising
    assert [int(e) for e in ends if e > len(prefix)] == [len(prefix) + 1, len(prefix) + 11, len(text)]


@pytest.mark.slow
@pytest.mark.parametrize("language", ["en", "zh"])
def test_random_splices_count_exactly(smollm, smollm_tok, haystacks, language):
    from needlebench.sources.haystacks import tokenized_for

    corpus = tokenized_for(str(haystacks[language]), language, get_tokenizer(f"hf:{smollm}").name, 0)
    assert corpus.splice
    generator = np.random.default_rng(11)
    for _ in range(250):
        segments = []
        if generator.random() < 0.5:
            segments.append(LITERALS[generator.integers(len(LITERALS))])
        position = int(generator.integers(0, len(corpus.text) - 20_000))
        for _ in range(int(generator.integers(1, 5))):
            length = int(generator.integers(0, 3000))
            segments.append((position, position + length))
            position += length + int(generator.integers(0, 50))
            segments.append(LITERALS[generator.integers(len(LITERALS))])
        expected = len(smollm_tok.encode(corpus.render(segments), add_special_tokens=False))
        assert corpus.count(segments) == expected, segments
        split = int(generator.integers(0, len(segments) + 1))
        assert corpus.count(segments[split:], corpus.count_state(segments[:split])) == expected
    for i in (1, 1000, len(corpus.hard_chars) // 2, len(corpus.hard_chars) - 2):
        char, token = int(corpus.hard_chars[i]), int(corpus.hard_tokens[i])
        assert len(smollm_tok.encode(corpus.text[:char], add_special_tokens=False)) == token


def test_token_cache_entries_never_mix(smollm, tmp_path, monkeypatch):
    from needlebench.sources.corpus import Corpus
    from needlebench.sources.tokenized import tokenize_corpus

    monkeypatch.setenv("NEEDLEBENCH_CACHE", str(tmp_path))
    corpus = Corpus("tiny", "en", ("Alpha beta. Gamma delta!", "Epsilon zeta? Eta 12345."), "test", "none")
    hf, cl100k = get_tokenizer(f"hf:{smollm}"), get_tokenizer()
    assert _cache_key(corpus.text, hf) != _cache_key(corpus.text, cl100k)
    for tokenizer in (cl100k, hf, cl100k, hf):  # written once each, then read back from its own entry
        assert tokenize_corpus(corpus, tokenizer).tokens.tolist() == tokenizer.encode(corpus.text)
    entries = sorted((tmp_path / "tokens").glob("*.npz"))
    assert len(entries) == 2
    recorded = set()
    for entry in entries:
        with np.load(entry) as data:
            recorded.add(json.loads(bytes(data["meta"]).decode("utf-8"))["tokenizer"])
    assert recorded == {"cl100k_base", hf.name} and tokenizer_sha(smollm) in hf.name


# ---- builds ----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_builtin_single_zh_in_smollm_tokens_is_exact_and_verifies(tmp_path, smollm, smollm_tok):
    out = tmp_path / "ds"
    result = run("build", "single_zh_4k", "--tokenizer", f"hf:{smollm}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    recorded = f"hf:{smollm.name}@sha256:{tokenizer_sha(smollm)}"
    assert f"lengths counted in {recorded}: exact" in " ".join(result.stdout.split())
    manifest = json.loads((out / "needlebench.json").read_text(encoding="utf-8"))
    assert manifest["recipe"]["tokenizer"] == recorded
    rows = rows_of(out, "single_zh_4k")
    assert len(rows) == manifest["configs"]["single_zh_4k"]["rows"] == 800

    def count(text):
        return len(smollm_tok.encode(text, add_special_tokens=False))

    check_rows(rows[::3], count, builtin_frame, recorded)
    assert all(row["prompt_tokens"] == count(row["prompt"]) for row in rows)  # every row, not a sample
    # the same lengths in cl100k tokens are other prompts: the tokenizer decides the split
    cl100k = get_tokenizer()
    assert any(cl100k.count(row["prompt"]) != row["prompt_tokens"] for row in rows[:5])
    from needlebench.dataset.verify import verify_folder

    assert verify_folder(out) == {}  # rebuilt from the recipe alone (the tokenizer found by its hash): same bytes


@pytest.mark.slow
def test_experiments_en_single_and_zh_multi_in_smollm_tokens(tmp_path, smollm, smollm_tok, haystacks):
    from needlebench.dataset.verify import verify_folder

    (tmp_path / "tok").symlink_to(smollm, target_is_directory=True)
    single = {
        "name": "smol_single_en",
        "kind": "single",
        "language": "en",
        "tokenizer": "hf:tok",
        "haystack": str(haystacks["en"]),
        "needles": [
            {
                "needle": "The secret ingredient of the Zorvath stew is blue saffron.",
                "question": "What is the secret ingredient of the Zorvath stew?",
                "keyword": "blue saffron",
            },
            {
                "needle": "Captain Ilse keeps the map in a copper tube.",
                "question": "Where does Captain Ilse keep the map?",
                "keyword": "copper tube",
            },
        ],
        "sample_method": "sequential",
        "n_needles": 2,
        "lengths": [900, 2500],
        "depths": {"n": 5},
        "start_buffer": 60,
        "end_buffer": 40,
        "length_buffer": 100,
    }
    out = tmp_path / "ds"
    manifest = build_experiment_file(tmp_path, single, out)  # the file's own tokenizer, relative to the file
    recorded = f"hf:{smollm.name}@sha256:{tokenizer_sha(smollm)}"
    assert manifest["recipe"]["tokenizer"] == recorded
    assert manifest["experiments"]["smol_single_en"]["tokenizer"] == recorded

    def count(text):
        return len(smollm_tok.encode(text, add_special_tokens=False))

    def frame(row):
        from needlebench.tasks.prompts import frame_parts

        return frame_parts(row["task"] == "S-RT" and "single" or "multi_retrieval", row["language"], row["question"])

    rows = rows_of(out, "smol_single_en")
    assert len(rows) == 2 * 5 * 2
    check_rows(rows, count, frame, recorded)
    # the start/end buffers hold in SmolLM2 tokens: depth 0 sits 60 tokens in, depth 100 40 tokens before the end
    for row in rows:
        target = row["context_length"] - row["buffer"]
        assert row["requested_depths"][0] == round(100 * (60 + row["depth_percent"] / 100 * (target - 100)) / target, 6)
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"`{recorded}` tokens" in card

    multi = {
        "name": "smol_multi_zh",
        "kind": "multi_retrieval",
        "language": "zh",
        "diff": 20,
        "needles": [
            {"needle": "翡翠岛上藏着传说中的星尘碎片。", "question": "翡翠岛上藏着什么？", "keyword": "星尘碎片"},
            {
                "needle": "佐尔瓦斯星系的统治者是米瑞女王。",
                "question": "佐尔瓦斯星系的统治者是谁？",
                "keyword": "米瑞女王",
            },
        ],
        "lengths": [1200, 3000],
        "depths": [0, 30, 60],
        "length_buffer": 150,
        "haystack": str(haystacks["zh"]),
    }
    path = tmp_path / "multi.yaml"
    path.write_text(yaml.safe_dump(multi, allow_unicode=True), encoding="utf-8")
    out_zh = tmp_path / "ds_zh"
    allow = ["--allow-path", str(haystacks["zh"])]
    result = run("build", "--experiment", str(path), "--tokenizer", f"hf:{smollm}", "--out", str(out_zh), *allow)
    assert result.returncode == 0, result.stderr  # the command line's tokenizer for a file that names none
    assert f"lengths counted in {recorded}: exact" in " ".join(result.stdout.split())
    rows = rows_of(out_zh, "smol_multi_zh")
    assert len(rows) == 6 and all(len(row["needles"]) == 2 for row in rows)
    check_rows(rows, count, frame, recorded)
    assert verify_folder(out) == {} and verify_folder(out_zh) == {}
    rebuilt = tmp_path / "again"
    result = run("build", "--experiment", str(path), "--tokenizer", f"hf:{smollm}", "--out", str(rebuilt), *allow)
    assert result.returncode == 0, result.stderr
    for file in sorted(out_zh.rglob("*")):
        if file.is_file():
            assert (rebuilt / file.relative_to(out_zh)).read_bytes() == file.read_bytes(), file


def test_a_tokenizer_that_does_not_splice_takes_the_exact_fallback(tmp_path, metaspace_dir, haystacks):
    from tokenizers import Tokenizer

    from needlebench.dataset.verify import verify_folder
    from needlebench.sources.tokenizer import counting_note

    tokenizer = get_tokenizer(f"hf:{metaspace_dir}")
    assert not tokenizer.splices
    experiment = {
        "name": "metaspace_single",
        "kind": "single",
        "language": "en",
        "haystack": str(haystacks["en"]),
        "tokenizer": f"hf:{metaspace_dir}",
        "needles": [
            {
                "needle": "The ruler of the Zorvath star system is Queen Miri.",
                "question": "Who rules the Zorvath star system?",
                "keyword": "Queen Miri",
            }
        ],
        "lengths": [500, 1200],
        "depths": [0, 35, 70, 100],
        "length_buffer": 50,
    }
    out = tmp_path / "ds"
    manifest = build_experiment_file(tmp_path, experiment, out)
    assert "encoding every prompt whole" in counting_note(manifest["recipe"]["tokenizer"])
    backend = Tokenizer.from_file(str(metaspace_dir / "tokenizer.json"))

    def count(text):
        return len(backend.encode(text, add_special_tokens=False).ids)

    def frame(row):
        from needlebench.tasks.prompts import frame_parts

        return frame_parts("single", row["language"], row["question"])

    rows = rows_of(out, "metaspace_single")
    assert len(rows) == 8
    check_rows(rows, count, frame, tokenizer.name)
    assert verify_folder(out) == {}


# ---- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, words",
    [
        (["single_en_4k", "--tokenizer", "hf:/no/such/tokenizer-folder"], "not a local folder nor a model"),
        (["single_en_4k", "--tokenizer", "sentencepiece"], "allowed: cl100k_base or hf:PATH_OR_NAME"),
        (["single_en_4k", "--tokenizer", "hf:"], "allowed: cl100k_base or hf:PATH_OR_NAME"),
        (["atc_en", "--tokenizer", "hf:SMOLLM"], "counts cl100k_base tokens only"),
    ],
)
def test_bad_tokenizer_is_one_line_exit_2_nothing_written(tmp_path, smollm, args, words):
    out = tmp_path / "ds"
    args = [arg.replace("SMOLLM", str(smollm)) for arg in args]
    result = run("build", *args, "--out", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not out.exists()


def test_families_without_the_tokenised_haystack_refuse_an_hf_tokenizer(tmp_path, smollm):
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions
    from needlebench.errors import NeedlebenchError
    from needlebench.tasks.grid import registry

    stars = next(name for name, spec in registry().items() if spec.family == "counting_stars")
    options = BuildOptions(tokenizer=f"hf:{smollm}")
    for config in (stars, "atc_zh"):
        with pytest.raises(NeedlebenchError, match=f"config {config} counts cl100k_base tokens only; .*single_"):
            build_dataset([config], tmp_path / "ds", options, progress=False)
        assert not (tmp_path / "ds").exists()
    with pytest.raises(NeedlebenchError, match="compat mode opencompass counts cl100k_base tokens .* without --compat"):
        BuildOptions(tokenizer=f"hf:{smollm}", compat="opencompass")


@pytest.mark.slow
@pytest.mark.parametrize(
    "value, words",
    [("bert-base", "key tokenizer: 'bert-base' is not allowed"), ("hf:/no/such/folder", "key tokenizer:")],
)
def test_bad_experiment_tokenizer_is_one_line(tmp_path, value, words):
    experiment = {
        "name": "bad_tok",
        "kind": "single",
        "language": "en",
        "tokenizer": value,
        "needles": [{"needle": "A.", "question": "B?", "keyword": "A"}],
        "lengths": [500],
        "depths": [50],
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(experiment), encoding="utf-8")
    result = run("build", "--experiment", str(path), "--out", str(tmp_path / "ds"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "ds").exists()


@pytest.mark.slow
def test_a_long_text_is_tokenised_in_chunks_exactly(smollm, haystacks, monkeypatch):
    from needlebench.sources import hf_tokenizer

    tokenizer = get_tokenizer(f"hf:{smollm}")
    for language in ("en", "zh"):
        text = haystacks[language].read_text(encoding="utf-8")[:200_000]
        whole_tokens, whole_ends = tokenizer.tokens_and_piece_ends(text)
        monkeypatch.setattr(hf_tokenizer, "CHUNK_CHARS", 20_000)
        monkeypatch.setattr(hf_tokenizer, "CHUNK_MARGIN", 512)
        tokens, ends = tokenizer.tokens_and_piece_ends(text)
        monkeypatch.undo()
        assert len(text) > 5 * 20_000
        assert tokens.tolist() == whole_tokens.tolist() == tokenizer.encode(text)
        assert ends.tolist() == whole_ends.tolist()


@pytest.mark.slow
def test_later_loads_skip_transformers_once_it_encodes_as_the_bare_file(smollm, smollm_tok):
    get_tokenizer(f"hf:{smollm}")  # a first load (through transformers) notes that the bare file encodes the same
    script = (
        "import sys; from needlebench.sources.tokenizer import get_tokenizer; "
        f"t = get_tokenizer({f'hf:{smollm}'!r}); "
        "print('transformers' in sys.modules, type(t.tokenizer).__module__, t.name, t.count(sys.argv[1]))"
    )
    text = "Hello 12345 world,  这是一个测试。\n\n  <|im_end|>x"
    result = subprocess.run([sys.executable, "-c", script, text], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    imported, module, name, count = result.stdout.split()
    assert (imported, module) == ("False", "tokenizers")
    assert name == f"hf:{smollm.name}@sha256:{tokenizer_sha(smollm)}"
    assert int(count) == len(smollm_tok.encode(text, add_special_tokens=False))


@pytest.mark.slow
def test_a_model_in_the_local_hugging_face_cache_loads_by_name_offline(tmp_path, smollm):
    """A model name resolves in the local Hugging Face cache only (HF_HUB_OFFLINE), is recorded as ORG/NAME, and
    its recorded form loads again by name on a machine that never read it from a folder."""
    snapshot = tmp_path / "hub" / "models--TestOrg--tiny-smol" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        (snapshot / name).write_bytes((smollm / name).read_bytes())
    (tmp_path / "hub" / "models--TestOrg--tiny-smol" / "refs").mkdir()
    (tmp_path / "hub" / "models--TestOrg--tiny-smol" / "refs" / "main").write_text("0123abcd", encoding="utf-8")
    recorded = f"hf:TestOrg/tiny-smol@sha256:{tokenizer_sha(smollm)}"
    script = (
        "import sys; from needlebench.sources.tokenizer import canonical_tokenizer as c; "
        "print(' '.join(c(spec) for spec in sys.argv[1:]))"
    )
    for cache, specs in (("a", ["hf:TestOrg/tiny-smol", f"hf:{snapshot}"]), ("b", [recorded])):
        env = {
            **os.environ,
            "HF_HUB_CACHE": str(tmp_path / "hub"),
            "HF_HUB_OFFLINE": "1",
            "NEEDLEBENCH_CACHE": str(tmp_path / cache),
        }
        result = subprocess.run(
            [sys.executable, "-c", script, *specs], capture_output=True, text=True, env=env, timeout=300
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [recorded] * len(specs)
    env["NEEDLEBENCH_CACHE"] = str(tmp_path / "c")
    missing = subprocess.run(
        [sys.executable, "-c", script, "hf:TestOrg/not-cached"], capture_output=True, text=True, env=env, timeout=300
    )
    assert (
        missing.returncode != 0 and "not a local folder nor a model in the local Hugging Face cache" in missing.stderr
    )
