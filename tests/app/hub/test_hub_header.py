"""A Hub GGUF file's header read with Range requests, and the planner's pick of a variant from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.hardware.profile import HardwareProfile
from app.hub.remote_header import HeaderCache, read_remote_header
from app.hub.variants import RepoFile, gguf_variants
from app.planner.calibration import CalibrationStore
from app.planner.facts import facts_from_gguf
from app.planner.plans import plan_model
from app.service.control.recommend_variant import header_file, pick_from_plan, plan_variants
from engines.gguf import GGUFError, read_gguf_prefix
from tests.support.hub_server import SLICE_BYTES, FakeHub, add_repo

REPO_ID = "org/smol-GGUF"
FILE = "smol-Q4_1.gguf"
KB = 1024
FIXTURES = Path(__file__).parents[2] / "fixtures" / "hardware"


def served_ranges(hub: FakeHub, filename: str) -> list[tuple[int, int]]:
    """(first, last) byte of every answered GET of the file."""
    ranges = []
    for entry in hub.downloads(filename):
        found = re.fullmatch(r"bytes=(\d+)-(\d+)", entry.range or "")
        assert found, f"a GET without a bounded Range: {entry.range!r}"
        ranges.append((int(found.group(1)), int(found.group(2))))
    return ranges


def test_the_header_comes_from_the_first_megabytes_only(hub: FakeHub, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    info = read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None)
    whole = read_gguf_prefix(gguf_bytes, len(gguf_bytes), FILE)
    assert (info.metadata, info.tensor_bytes) == (whole.metadata, whole.tensor_bytes)
    assert served_ranges(hub, FILE) == [(0, 2 * 1024 * KB - 1)]


def test_the_range_grows_while_the_header_runs_past_it(hub: FakeHub, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    info = read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None, first_bytes=64 * KB)
    assert info.architecture == "llama"
    ranges = served_ranges(hub, FILE)
    assert len(ranges) > 1 and all(first == 0 for first, _ in ranges)
    assert [last for _, last in ranges] == sorted({last for _, last in ranges})  # each one larger
    assert ranges[-1][1] < 4 * 1024 * KB


def test_the_cap_stops_a_header_that_keeps_growing(hub: FakeHub, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    with pytest.raises(GGUFError, match="larger than 262,144 bytes"):
        read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None, first_bytes=64 * KB, max_bytes=256 * KB)
    assert max(last for _, last in served_ranges(hub, FILE)) < 256 * KB


def test_a_server_that_ignores_range_still_gives_the_header(hub: FakeHub, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    hub.faults.ignore_range = True
    assert read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None).architecture == "llama"


def test_tensor_data_is_checked_against_the_size_the_hub_gives(hub: FakeHub, gguf_slice: bytes) -> None:
    add_repo(hub, REPO_ID, {"cut-Q4_1.gguf": gguf_slice, "junk-Q8_0.gguf": b"PK\3\4" * 1024})
    with pytest.raises(GGUFError, match="truncated: tensor"):
        read_remote_header(REPO_ID, "cut-Q4_1.gguf", endpoint=hub.url, token=None)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_remote_header(REPO_ID, "junk-Q8_0.gguf", endpoint=hub.url, token=None)
    assert len(gguf_slice) == SLICE_BYTES


def test_the_cache_keeps_the_newest_headers(hub: FakeHub, gguf_bytes: bytes) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    info = read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None)
    cache = HeaderCache(capacity=2)
    for commit in ("a", "b", "c"):
        cache.put((REPO_ID, commit, FILE), info)
    assert cache.get((REPO_ID, "a", FILE)) is None and cache.get((REPO_ID, "c", FILE)) is info


def machine(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def test_one_header_plans_every_variant_scaled_by_its_size(hub: FakeHub, gguf_bytes: bytes, tmp_path: Path) -> None:
    add_repo(hub, REPO_ID, {FILE: gguf_bytes})
    facts = facts_from_gguf(read_remote_header(REPO_ID, FILE, endpoint=hub.url, token=None))
    size = len(gguf_bytes)
    variants = gguf_variants([
        RepoFile(FILE, size),
        RepoFile("smol-Q8_0.gguf", size * 17 // 10),
        RepoFile("smol-F16-00001-of-00002.gguf", size * 3 // 2),
        RepoFile("smol-F16-00002-of-00002.gguf", size * 3 // 2),
        RepoFile("smol-Q2_K-00001-of-00002.gguf", size // 2),  # incomplete: never planned
    ])  # fmt: skip
    source = header_file(variants)
    assert source is not None and source.path == FILE  # a single file beats a smaller split one
    planned = {v.name: v for v in plan_variants(REPO_ID, variants, source, facts)}
    assert set(planned) == {"Q4_1", "Q8_0", "F16"}
    assert facts.weight_bytes is not None
    assert planned["F16"].facts.weight_bytes == facts.weight_bytes * 3
    assert planned["Q8_0"].facts.parameters == planned["F16"].facts.parameters == facts.parameters
    assert planned["F16"].location == f"{REPO_ID}/smol-F16-00001-of-00002.gguf"
    calibration = CalibrationStore(tmp_path / "calibration.db")
    recommendation = plan_model(
        machine("laptop_8core_16gb"), REPO_ID, list(planned.values()), "chat", None, calibration
    )
    pick = pick_from_plan(recommendation)
    assert pick.source == "planner" and pick.variant == "F16"  # 135M parameters: the best quality fits anywhere
    assert pick.plan is not None and pick.plan["max_context"] >= pick.plan["context"] > 0
    assert pick.plan["memory"]["ram"] > 0 and "engine llama.cpp" in pick.plan["reasons"][0]
    assert pick.basis.startswith("plan for this machine: engine llama.cpp")
