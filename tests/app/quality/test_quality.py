"""`modeldeck quantize` and `modeldeck quality` on the bundled model with llama.cpp's own tools built from the
pinned sources: a Q4_0 and a Q2_K made from the bundled Q4_1 (requantized), then measured against it on a short
text. The order of the figures is what quantization theory says and llama.cpp publishes: fewer bits, more loss."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.hub.library import BUNDLED_ID, known_models
from app.installs.llama_tools_build import TOOLS_ENV
from app.paths import AppPaths
from app.quality.card import QualityCard, quality_dir
from app.quality.quantize import PROVENANCE_SUFFIX
from tests.support.quality_tools import Q2_K, Q4_0, TOKENS, modeldeck


def read_provenance(model_path: Path) -> dict[str, object]:
    """The provenance ModelDeck wrote beside a file it quantized."""
    data = json.loads(model_path.with_name(model_path.name + PROVENANCE_SUFFIX).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def finance_text(path: Path, sentences: int = 400) -> Path:
    """A user's own domain text: varied sentences of quarterly figures (no two alike), about 2,500 tokens."""
    rng = random.Random(19)
    companies = ["Northwind Capital", "Harbor Bancorp", "Cedar Lending", "Atlas Insurance", "Summit Payments"]
    items = ["net interest income", "operating expenses", "loan loss provisions", "fee revenue", "tier 1 capital"]
    lines = [
        f"In the {rng.choice(['first', 'second', 'third', 'fourth'])} quarter, {rng.choice(companies)} reported "
        f"{rng.choice(items)} of ${rng.randint(10, 990)}.{rng.randint(0, 9)} million, "
        f"{rng.choice(['up', 'down'])} {rng.randint(1, 40)} percent from a year earlier."
        for _ in range(sentences)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_quantize_makes_variants_that_join_the_library_with_their_provenance(
    paths: AppPaths, with_variants: dict[str, Path], bundled_gguf: Path
) -> None:
    models = known_models(paths)
    assert {Q4_0, Q2_K} <= set(models), sorted(models)
    for quantization, path in with_variants.items():
        provenance = read_provenance(path)
        assert provenance is not None
        assert provenance["quantization"] == quantization and provenance["requantized"] is True
        assert provenance["source"] == {"id": BUNDLED_ID, "path": str(bundled_gguf), "quantization": "Q4_1",
                                        "size_bytes": bundled_gguf.stat().st_size}  # fmt: skip
        assert path.stat().st_size < bundled_gguf.stat().st_size
    assert with_variants["Q2_K"].stat().st_size < with_variants["Q4_0"].stat().st_size


def test_quality_orders_the_variants_by_what_they_lose(paths: AppPaths, with_variants: dict[str, Path]) -> None:
    done = modeldeck("quality", BUNDLED_ID, "--tokens", TOKENS, "--json")
    assert done.returncode == 0, done.stderr
    card = QualityCard.from_dict(json.loads(done.stdout))
    assert (quality_dir(paths) / f"{card.id}.json").is_file() and (quality_dir(paths) / f"{card.id}.md").is_file()
    assert card.reference == BUNDLED_ID, "the most precise variant in the library is the reference"
    assert card.text["kind"] == "default" and "Python" in card.text["description"]
    assert card.text["chunks"] == 2 and card.text["n_ctx"] == 256
    by_id = {r.id: r for r in card.results}
    ref, q4, q2 = by_id[BUNDLED_ID], by_id[Q4_0], by_id[Q2_K]
    assert ref.reference and ref.kld_mean == 0.0 and ref.top_token_agreement == 1.0
    # Perplexity and KL divergence rise, top-token agreement falls, from the reference to Q4_0 to Q2_K.
    assert ref.perplexity is not None and q4.perplexity is not None and q2.perplexity is not None
    assert ref.perplexity < q4.perplexity < q2.perplexity
    assert q4.kld_mean is not None and q2.kld_mean is not None and 0 < q4.kld_mean < q2.kld_mean
    assert q4.top_token_agreement is not None and q2.top_token_agreement is not None
    assert 1.0 > q4.top_token_agreement > q2.top_token_agreement > 0
    assert q4.ppl_ratio is not None and q4.ppl_ratio > 1
    # Time and peak memory of each tool run are on the card (the benchmark's figures).
    assert all(r.seconds > 0 and r.peak_rss_bytes and r.peak_rss_bytes > 10 * 2**20 for r in card.results)
    markdown = (quality_dir(paths) / f"{card.id}.md").read_text()
    assert "top-token agreement" in markdown and Q2_K in markdown


def test_the_users_own_text_is_scored_and_said_on_the_card(
    paths: AppPaths, with_variants: dict[str, Path], tmp_path: Path
) -> None:
    text = finance_text(tmp_path / "quarterly.txt")
    done = modeldeck("quality", BUNDLED_ID, "--variant", Q4_0, "--data", str(text), "--tokens", TOKENS, "--json")
    assert done.returncode == 0, done.stderr
    card = QualityCard.from_dict(json.loads(done.stdout))
    assert card.text["kind"] == "user" and "quarterly.txt" in card.text["description"]
    assert card.text["chars"] == len(text.read_text())
    assert [r.id for r in card.results] == [BUNDLED_ID, Q4_0], "only the variant asked for, and the reference"
    # Two cards side by side: the default text's and this one.
    other = modeldeck("quality", BUNDLED_ID, "--variant", Q4_0, "--tokens", TOKENS, "--json")
    assert other.returncode == 0, other.stderr
    second = QualityCard.from_dict(json.loads(other.stdout))
    compared = modeldeck("quality", "--compare", card.id, second.id)
    assert compared.returncode == 0, compared.stderr
    assert "quarterly.txt" in compared.stdout and "Python" in compared.stdout and f"{Q4_0} mean KLD" in compared.stdout


@pytest.mark.parametrize(
    ("text", "args", "said"),
    [
        (b"\xff\xfe not utf-8", [], "is not UTF-8"),
        (b"  \n", [], "holds no text"),
        (b"Too short a text.", [], "the text is too short"),
        (None, ["--tokens", "8"], "argument --tokens: must be from 128 to 1048576, got 8"),
        (None, ["--reference", "/nonexistent.gguf"], "neither a variant nor a file"),
    ],
)
def test_bad_input_is_refused_with_a_reason_and_no_card(
    paths: AppPaths, with_variants: dict[str, Path], tmp_path: Path, text: bytes | None, args: list[str], said: str
) -> None:
    data = tmp_path / "text.txt"
    if text is not None:
        data.write_bytes(text)
        args = ["--data", str(data), "--tokens", TOKENS]
    done = modeldeck("quality", BUNDLED_ID, *args)
    assert done.returncode != 0 and said in done.stderr, done.stderr
    assert not quality_dir(paths).exists() or not list(quality_dir(paths).glob("*.json"))


def test_a_model_without_variants_or_tools_says_what_to_do(paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOOLS_ENV, str(paths.data / "no-tools"))
    done = modeldeck("quality", BUNDLED_ID)
    assert done.returncode == 2 and "modeldeck quantize" in done.stderr
    unknown = modeldeck("quantize", "no-such-model", "--to", "Q4_0")
    assert unknown.returncode == 2 and "unknown model" in unknown.stderr
    bad_type = modeldeck("quantize", BUNDLED_ID, "--to", "Q9_9")
    assert bad_type.returncode == 2 and "unknown type" in bad_type.stderr
    no_tools = modeldeck("quantize", BUNDLED_ID, "--to", "Q4_0")
    assert no_tools.returncode == 2 and "engines build llama-tools" in no_tools.stderr
    assert not paths.models_dir.exists() or not list(paths.models_dir.glob("*.gguf"))


def test_the_recommendation_shows_measured_loss_with_a_card_and_published_loss_without(
    paths: AppPaths, with_variants: dict[str, Path]
) -> None:
    measured = modeldeck("quality", BUNDLED_ID, "--variant", Q4_0, "--tokens", TOKENS, "--json")
    assert measured.returncode == 0, measured.stderr
    card = QualityCard.from_dict(json.loads(measured.stdout))
    with_card = modeldeck("recommend", Q4_0, "--json")
    best = json.loads(with_card.stdout)["best"]
    assert best["quality_loss"]["source"] == "measured" and best["quality_loss"]["card"] == card.id
    q4 = card.result(Q4_0)
    assert q4 is not None and best["quality_loss"]["ppl_increase_pct"] == pytest.approx(q4.ppl_increase_pct)
    without = json.loads(modeldeck("recommend", Q2_K, "--json").stdout)["best"]
    assert without["quality_loss"]["source"] == "published"
    assert without["quality_loss"]["ppl_increase"] == 3.5199 and "published" in without["quality_loss"]["label"]
    text = modeldeck("recommend", Q2_K).stdout
    assert "Quality  published: +3.5199 PPL on Llama-3-8B" in text


def test_quantize_with_the_users_text_uses_an_importance_matrix_from_it(
    paths: AppPaths, with_variants: dict[str, Path], llama_tools: Path, tmp_path: Path
) -> None:
    """The same type made from the same file, once plain (the session's Q4_0) and once weighted by the user's
    text: the bytes differ, and the provenance names the text."""
    text = finance_text(tmp_path / "filings.txt", sentences=60)
    out = tmp_path / "imatrix-home"
    done = modeldeck("quantize", BUNDLED_ID, "--to", "Q4_0", "--data", str(text), MODELDECK_HOME=str(out))
    assert done.returncode == 0, done.stderr
    made = next((out / "data" / "models").glob("*.Q4_0.gguf"))
    provenance = read_provenance(made)
    assert provenance is not None and provenance["importance_matrix"] == {"text": str(text), "chunks": 32}
    assert made.read_bytes() != with_variants["Q4_0"].read_bytes(), "the importance matrix changed the weights"
    again = modeldeck("quantize", BUNDLED_ID, "--to", "Q4_0", MODELDECK_HOME=str(out))
    assert again.returncode == 1 and "already exists" in again.stderr, "an existing file is never overwritten"
    assert not list((out / "data" / "models").glob(".quantize-*")), "no scratch folder is left"


def test_a_reference_file_that_is_not_gguf_never_reaches_the_tool(
    paths: AppPaths, with_variants: dict[str, Path], tmp_path: Path
) -> None:
    fake = tmp_path / "weights.gguf"
    fake.write_bytes(b"GGUF" + b"\xff" * 60)
    done = modeldeck("quality", BUNDLED_ID, "--reference", str(fake), "--tokens", TOKENS)
    assert done.returncode == 2 and "is not a readable GGUF file" in done.stderr, done.stderr
    assert not (paths.logs / "quality").exists(), "no tool ran"
