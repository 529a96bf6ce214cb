"""The control API's answers as types: the states a model can be in, the named sets of them every client uses, and
what /api/models, /api/events, /api/downloads, /api/bench, /api/hardware and /api/recommend answer.

No Qt and no engines here (an import-linter contract keeps it so): the GUI, the CLI and the service share it.
tests/app/test_api_types.py pins ModelState to the engines' states and these shapes to a real service's answers.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypedDict


class ModelState(StrEnum):
    """The state the service reports for a model (`state` in /api/models, `state`/`previous` in engine events).

    The values are engines.states.EngineState's: the service adds none of its own (a remote or external model
    reports `ready`, a model whose plan was refused `failed`).
    """

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    RESTARTING = "restarting"
    FAILED = "failed"


# The model runs or is on its way (the service's own ACTIVE_STATES): it counts as loaded, Stop applies to it, it
# cannot be deleted, and a launch with other parameters conflicts with it.
ACTIVE = frozenset({ModelState.STARTING, ModelState.READY, ModelState.RESTARTING})
# An engine process is there, running or on its way out: what "Running: ..." lists.
HAS_ENGINE = ACTIVE | {ModelState.STOPPING}
# Launch applies: nothing runs, or what ran failed.
LAUNCHABLE = frozenset({ModelState.STOPPED, ModelState.FAILED})
# Something went wrong (or is being retried): a diagnosis applies.
TROUBLED = frozenset({ModelState.FAILED, ModelState.RESTARTING})


# Models ------------------------------------------------------------------------------------------------------


class Diagnosis(TypedDict):
    kind: str  # out_of_memory, cpu_instructions, unsupported_architecture, corrupt_file, port_taken
    summary: str
    advice: str


class MemoryCheckRecord(TypedDict):
    """Predicted against measured memory once the engine is ready (and after its first request)."""

    predicted_at_load_bytes: int
    measured_at_load_bytes: int
    error_at_load: float
    predicted_peak_bytes: int
    measured_after_request_bytes: int | None
    within_peak: bool | None
    parts: dict[str, int]


class PlanSummary(TypedDict):
    """The plan's parameters a launch can override, under the names it overrides them with."""

    context: int
    gpu_layers: int
    threads: int
    batch: int
    parallel: int
    draft: str | None  # the model drafting for it (llama-server's speculative decoding)
    lookup: int  # prompt-lookup decoding's tokens a step (llama-cpp-python); 0: off


class LaunchRecord(TypedDict):
    argv: list[str]
    env: dict[str, str]  # what the service added to the environment, secrets redacted


class StartupFacts(TypedDict):
    """What vLLM said while starting; None until said."""

    kv_cache_tokens: int | None
    max_concurrency: float | None
    concurrency_length: int | None
    model_load_bytes: int | None
    model_load_s: float | None
    kv_cache_bytes: int | None
    init_engine_s: float | None


class StartupRecord(StartupFacts):
    """The start-up facts so far, and the same in words."""

    summary: list[str]


class FolderPlanRecord(TypedDict):
    """A vLLM folder model's plan: its parameters, predictions and reasons, and how vLLM's own figures compare."""

    parameters: dict[str, Any]
    predicted_kv_cache_tokens: int | None
    predicted_max_concurrency: int | None
    reasons: list[str]
    check: list[str]


class CompanionRecord(TypedDict):
    """The process that makes a model's embeddings when its engine cannot in the same process."""

    state: ModelState
    message: str
    pid: int | None
    port: int | None
    restarts: int
    footprint_bytes: int | None
    rss_bytes: int | None


class ModelRecord(TypedDict):
    """One model and its engine, as GET /api/models lists it (and start, stop and the event snapshot answer)."""

    id: str
    name: str
    path: str | None  # the file or folder; for an external server its URL
    size_bytes: int
    source: str  # bundled, hub, local, folder, external, remote
    engine: str
    state: ModelState
    message: str
    pid: int | None
    port: int | None
    restarts: int
    diagnosis: Diagnosis | None
    rss_bytes: int | None
    running_requests: int
    waiting_requests: int
    memory: MemoryCheckRecord | None
    plan: PlanSummary | None
    launch: LaunchRecord | None
    idle_ttl_s: float | None
    startup: StartupRecord | None
    vllm: FolderPlanRecord | None
    max_concurrent_requests: int | None
    embedding_companion: CompanionRecord | None


class TlsRecord(TypedDict):
    """An HTTPS endpoint's certificate: what clients must trust."""

    fingerprint_sha256: str
    cert_path: str
    self_signed: bool


class EndpointRecord(TypedDict):
    """GET /api/endpoint: where the OpenAI endpoint answers and its key."""

    url: str
    api_key: str | None  # None: started without a key (loopback only)
    key_source: str
    key_note: str
    tls: TlsRecord | None  # None: plain HTTP


class MemoryBudget(TypedDict):
    bytes: int | None
    source: str


class HealthRecord(TypedDict):
    status: str
    version: str
    memory_budget: MemoryBudget


# Downloads ---------------------------------------------------------------------------------------------------

DownloadState = Literal["running", "paused", "cancelled", "failed", "completed"]


class DownloadRecord(TypedDict):
    """One download, as GET /api/downloads lists it and `download` events carry it."""

    id: str
    repo: str
    variant: str
    state: DownloadState
    done: int
    total: int
    rate_bps: float | None
    eta_s: float | None
    current: str
    error: str | None
    model_id: str | None
    phase: str  # download, or verify: hashing `current`, `checked` of `check_total` bytes
    checked: int
    check_total: int


# Benchmarks --------------------------------------------------------------------------------------------------

BenchState = Literal["running", "completed", "failed", "cancelled"]


class BenchLevel(TypedDict):
    """One concurrency level's results. Rates per second of wall time, latencies in seconds, unknown None."""

    concurrency: int
    requests: int
    completed: int
    errors: int
    duration_s: float
    output_tokens: int
    prompt_tokens_mean: float | None
    output_tokens_per_s: float
    request_rate: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    gain: float | None
    first_error: str | None
    prompt_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    ttft_by_turn_s: list[float | None] | None
    warm_cold_ratio: float | None


class BenchRunRecord(TypedDict):
    """The running (or last) benchmark, as POST /api/bench answers and `bench` events carry it."""

    id: str
    state: BenchState
    phase: str  # starting, model, warmup, level, saving, then the final state
    model: str
    concurrency: list[int]
    prompt_tokens: int
    output_tokens: int
    requests_per_level: list[int]
    prompt_mode: str
    prefix_tokens: int
    conversations: int | None
    turns: int
    seed: int
    level_index: int | None
    level_done: int
    fraction: float
    levels: list[BenchLevel]
    card_id: str | None
    error: str | None
    started: float
    finished: float | None


class BenchCardSummary(TypedDict):
    """A saved benchmark card in one line, as GET /api/bench lists them."""

    id: str
    created: str
    model: str | None
    quantization: str | None
    engine: str | None
    concurrency: list[int]
    best_output_tokens_per_s: float | None
    errors: int
    prompt_tokens: int | None
    output_tokens: int | None
    prompt_mode: str
    best_prompt_tokens_per_s: float | None


class BenchListing(TypedDict):
    run: BenchRunRecord | None
    cards: list[BenchCardSummary]


# Hardware and recommendations --------------------------------------------------------------------------------


class CPURecord(TypedDict):
    model: str | None
    architecture: str
    physical_cores: int | None
    logical_cores: int
    features: list[str]
    memory_bandwidth: float | None


class GPURecord(TypedDict):
    index: int
    vendor: str  # nvidia or apple
    name: str
    memory_total: int
    memory_free: int | None
    memory_used: int | None
    compute_capability: list[int] | None
    utilization_percent: int | None
    mig_enabled: bool | None
    memory_bandwidth: float | None
    uuid: str | None


class GPUProblemRecord(TypedDict):
    backend: str
    problem: str
    advice: str
    severity: Literal["problem", "note"]
    device_present: bool | None


class HardwareRecord(TypedDict):
    """GET /api/hardware: the service machine's profile. Unknown facts are None."""

    cpu: CPURecord
    ram_total: int
    ram_available: int
    gpus: list[GPURecord]
    unified_memory: bool
    metal: bool
    driver_version: str | None
    cuda_version: str | None
    gpu_problems: list[GPUProblemRecord]
    models_dir: str | None
    disk_free: int | None
    os: str | None
    schema_version: int


class EngineFitRecord(TypedDict):
    """One engine scored for a model on this machine."""

    engine: str
    label: str
    launched: bool
    installed: bool | None
    version: str | None
    scores: dict[str, int]
    total: float
    lacks: list[str]
    notes: list[str]
    features: list[str]
    usable: bool


class OptionRecord(TypedDict):
    """One costed way to run a model, with the reason for each parameter."""

    engine: str
    variant: str
    location: str
    tier: str  # gpu, partial, cpu
    fits: bool
    context: int
    max_context: int
    memory: dict[str, Any]  # app.planner.memory.MemoryEstimate.to_dict()
    parameters: dict[str, Any]
    reasons: list[str]
    decode_tokens_per_s: float | None
    bits_per_weight: float | None
    command: list[str]
    quality_loss: dict[str, Any] | None  # measured (a quality card) or published (llama.cpp), with its label


class RecommendationRecord(TypedDict):
    """GET /api/recommend: the best option (None when nothing fits), the alternatives and what stood in the way."""

    engines: list[EngineFitRecord]
    use: str
    best: OptionRecord | None
    alternatives: list[OptionRecord]
    problems: list[str]
    budgets: dict[str, int]


# The library and the Hub ------------------------------------------------------------------------------------


class LibraryEntry(TypedDict):
    """A model with files: its size on disk, its origin and its engine's state."""

    id: str
    name: str
    source: str
    path: str
    size_on_disk: int
    deletable: bool
    repo: str | None
    variant: str | None
    state: ModelState


class DiskRecord(TypedDict):
    what: str  # models folder, Hugging Face cache, downloads folder
    path: str
    free: int | None


class LibraryRecord(TypedDict):
    """GET /api/library."""

    models: list[LibraryEntry]
    disk: list[DiskRecord]


class VerdictRecord(TypedDict):
    """A verification: each check in words, and whether all of them passed."""

    ok: bool
    checks: list[str]


class ImportedRecord(TypedDict):
    id: str
    name: str
    path: str
    size_on_disk: int


class HubSearchResult(TypedDict):
    id: str
    downloads: int | None
    likes: int | None
    gated: bool
    pipeline_tag: str | None
    last_modified: str | None  # ISO 8601


class HubFile(TypedDict):
    path: str
    size: int | None
    sha256: str | None


class HubVariant(TypedDict):
    name: str
    quant: str | None
    size: int | None
    complete: bool
    files: list[str]
    quality_loss: dict[str, Any] | None  # measured (a quality card) or published (llama.cpp), with its label
    fit: str | None  # gpu, partial, cpu, too_big as the service's planner (or the file sizes) see this machine


class HubRecommendation(TypedDict):
    source: str  # planner or size
    plan: dict[str, Any] | None  # the planner's option: reasons, memory, max context


class HubModelPage(TypedDict):
    """GET /api/hub/models/REPO: files, variants, license, gated, and the variant suggested for this machine."""

    id: str
    commit: str | None
    gated: bool
    license: str | None
    page_url: str
    files: list[HubFile]
    variants: list[HubVariant]
    recommended: str | None
    recommendation_basis: str
    recommendation: HubRecommendation


class DeletedRecord(TypedDict):
    deleted: str  # the model's id


class RemovedRecord(TypedDict):
    removed: str  # the remote's name


class RemoteRecord(TypedDict):
    """A remote endpoint: its models as served here, and whether a key is kept (never the key)."""

    name: str
    url: str
    models: list[str]
    has_key: bool


# Engines, metrics, requests and settings -----------------------------------------------------------------------


class EngineInstallation(TypedDict):
    installed: bool
    version: str | None
    detail: str


class AboutRecord(TypedDict):
    """GET /api/about: the service's version and commit, and each engine's installation."""

    version: str
    commit: str | None
    source: str
    engines: dict[str, EngineInstallation]


class SeriesRecord(TypedDict):
    name: str
    labels: dict[str, str]
    t: list[float]
    v: list[float]


class SeriesAnswer(TypedDict):
    """GET /api/series: metric series over a window, points 1 s apart up to an hour and minute averages beyond."""

    window_s: float
    now: float
    interval_s: float
    sampler: dict[str, float]
    series: list[SeriesRecord]


class RequestRecord(TypedDict):
    """One request through the gateway (no prompt or output text), as GET /api/requests lists them."""

    id: str
    time: float
    model: str
    route: str
    stream: bool
    status: int
    queued_s: float
    ttft_s: float | None
    duration_s: float
    prompt_tokens: int | None
    completion_tokens: int | None
    itl_p50_s: float | None
    itl_max_s: float | None
    decode_tps: float | None
    error: str | None
    prompt_cached_tokens: int | None
    slot: int | None
    streamed_tokens: int  # content events booked while the stream flowed (the dashboard's per-chunk rate)


class KeyPresence(TypedDict):
    present: bool
    source: str


class TokenPresence(TypedDict):
    set: bool
    source: str
    note: str


class LanRecord(TypedDict):
    addresses: list[str]
    warning: str
    port: int


class SettingsAnswer(TypedDict):
    """GET /api/settings (PUT adds `changed`): the saved settings, what the running service uses, what needs a
    restart, and whether an API key and a Hugging Face token are kept (never their values)."""

    settings: dict[str, Any]  # app.settings.Settings.to_dict(): its fields grow with the product
    running: dict[str, Any]
    restart_required: list[str]
    problem: str | None
    api_key: KeyPresence
    hf_token: TokenPresence
    lan: LanRecord


class SavedSettingsAnswer(SettingsAnswer):
    changed: list[str]


class BenchCardRecord(TypedDict):
    """A saved benchmark card (GET /api/bench/cards/ID): what ran where, and each level's results."""

    id: str
    created: str
    modeldeck_version: str
    model: dict[str, Any]  # id, name, path, size_bytes, quantization
    engine: dict[str, Any]  # name, version, plan, launch
    hardware: dict[str, Any]  # a fingerprint of the machine
    parameters: dict[str, Any]
    results: list[BenchLevel]
    schema_version: int


# Quality runs and cards (/api/quality) ------------------------------------------------------------------------


class QualityRunRecord(TypedDict):
    """A quality run: its variants measured one chunk of text at a time, and the card it saved."""

    id: str
    state: BenchState
    model: str
    variants: list[str]
    reference: str | None
    data: str | None  # the user's text file on the service's machine; None: the default text
    tokens: int
    step: int
    steps: int
    variant: str | None
    chunk: int
    chunks: int
    fraction: float
    results: list[dict[str, Any]]  # per variant: perplexity, KL divergence, top-token agreement, time, memory
    card_id: str | None
    error: str | None
    started: float
    finished: float | None


class QualityListing(TypedDict):
    run: QualityRunRecord | None
    cards: list[dict[str, Any]]  # saved cards' summaries (id, model, reference, text, variants), newest first


class QualityCardRecord(TypedDict):
    """A saved quality card (GET /api/quality/cards/ID), as app.quality.card.QualityCard writes it."""

    id: str
    created: str
    modeldeck_version: str
    model: str
    reference: str
    tool: dict[str, Any]
    hardware: dict[str, Any]
    text: dict[str, Any]
    results: list[dict[str, Any]]
    schema_version: int


# Engine builds (/api/engines/...) -----------------------------------------------------------------------------

BuildState = Literal["running", "completed", "failed", "cancelled"]


class EngineBuildRecord(TypedDict):
    """An engine build the service runs (POST /api/engines/llama-server/build): its step and percent done, and
    at the end the executable it installed or the error, with cmake's full log on the service's machine."""

    id: str
    engine: str
    state: BuildState
    percent: int
    step: str
    error: str | None
    log_path: str | None  # None: the build stopped before cmake wrote anything
    executable: str | None
    version: str | None
    backend: str | None
    started: float
    finished: float | None


class EngineBuildListing(TypedDict):
    build: EngineBuildRecord | None  # the running or last build; None before the first


# Per-model load settings (/api/models/ID/settings) -------------------------------------------------------------


class SettingsFree(TypedDict):
    ram_bytes: int
    gpu_bytes: int | None  # None: no GPU, or one whose free memory was not read


class ModelSettingsRecord(TypedDict):
    """A model's saved load settings, the plan they make with its engine, its memory, the bounds of each field."""

    model_id: str
    settings: dict[str, int | str]
    plan: dict[str, int | str]  # PlanSummary's fields and the engine
    memory: dict[str, Any]
    bounds: dict[str, Any]
    free: SettingsFree
    saved: bool
    draft_reason: str | None  # why the draft may draft for it ("same vocabulary, +N MB"); None without one
    drafts: list[str]  # the models that could draft for it (the same vocabulary, smaller), smallest first


# Events (GET /api/events) -------------------------------------------------------------------------------------


class SnapshotEvent(TypedDict):
    type: Literal["snapshot"]
    models: list[ModelRecord]


class EngineEvent(TypedDict):
    """A model's engine (or, with type embedding_companion, its embedding process) changed state."""

    type: Literal["engine", "embedding_companion"]
    model_id: str
    state: ModelState
    previous: ModelState
    message: str
    pid: int | None
    port: int | None
    time: float


class LogEvent(TypedDict):
    type: Literal["log"]
    model_id: str
    line: str


class StartupEvent(StartupFacts):
    """vLLM said more about its start: its facts so far (the record's, without the summary)."""

    type: Literal["startup"]
    model_id: str


class DownloadEvent(TypedDict):
    type: Literal["download"]
    download: DownloadRecord


class BenchEvent(TypedDict):
    type: Literal["bench"]
    run: BenchRunRecord


class QualityEvent(TypedDict):
    type: Literal["quality"]
    run: QualityRunRecord


class EngineBuildEvent(TypedDict):
    type: Literal["engine_build"]
    build: EngineBuildRecord


class SampleEvent(TypedDict):
    """Once a second: every metric point as [name, labels, value]."""

    type: Literal["sample"]
    t: float
    points: list[tuple[str, dict[str, str], float]]


class RequestEvent(RequestRecord):
    """One request through the gateway finished."""

    type: Literal["request"]


ServiceEvent = (
    SnapshotEvent
    | EngineEvent
    | LogEvent
    | StartupEvent
    | DownloadEvent
    | BenchEvent
    | QualityEvent
    | EngineBuildEvent
    | SampleEvent
    | RequestEvent
)


# From JSON -----------------------------------------------------------------------------------------------------
# The answers are taken as the service sends them; only the states become ModelState, so that a state this client
# does not know is a clear error here rather than a silent mismatch in every `in ACTIVE` that follows.


_STATE_VALUES = frozenset(state.value for state in ModelState)


def _state(value: object) -> ModelState:
    if isinstance(value, str) and value in _STATE_VALUES:
        return ModelState(value)
    known = ", ".join(ModelState)
    raise ValueError(
        f"The service reports a model state this client does not know: {value!r} (known: {known}). "
        "Are the service and this client the same version?"
    )


def model_from_json(raw: Any) -> ModelRecord:
    """A model record parsed from JSON, its states as ModelState; ValueError for a state this client lacks."""
    record: ModelRecord = raw
    record["state"] = _state(raw["state"])
    companion = record.get("embedding_companion")
    if companion is not None:
        companion["state"] = _state(companion["state"])
    return record


def library_from_json(raw: Any) -> LibraryRecord:
    """GET /api/library's answer, its states as ModelState; ValueError for a state this client lacks."""
    library: LibraryRecord = raw
    for entry in library["models"]:
        entry["state"] = _state(entry["state"])
    return library


def event_from_json(raw: Any) -> ServiceEvent:
    """An event parsed from JSON, its model states as ModelState; ValueError for a state this client lacks."""
    event: ServiceEvent = raw
    if event["type"] == "snapshot":
        event["models"] = [model_from_json(model) for model in event["models"]]
    elif event["type"] in ("engine", "embedding_companion"):
        event["state"], event["previous"] = _state(raw["state"]), _state(raw["previous"])
    return event


__all__ = [
    "ACTIVE",
    "HAS_ENGINE",
    "LAUNCHABLE",
    "TROUBLED",
    "AboutRecord",
    "BenchCardRecord",
    "BenchCardSummary",
    "BenchEvent",
    "BenchLevel",
    "BenchListing",
    "BenchRunRecord",
    "BenchState",
    "BuildState",
    "CPURecord",
    "CompanionRecord",
    "DeletedRecord",
    "Diagnosis",
    "DiskRecord",
    "DownloadEvent",
    "DownloadRecord",
    "DownloadState",
    "EndpointRecord",
    "EngineBuildEvent",
    "EngineBuildListing",
    "EngineBuildRecord",
    "EngineEvent",
    "EngineFitRecord",
    "EngineInstallation",
    "FolderPlanRecord",
    "GPUProblemRecord",
    "GPURecord",
    "HardwareRecord",
    "HealthRecord",
    "HubFile",
    "HubModelPage",
    "HubRecommendation",
    "HubSearchResult",
    "HubVariant",
    "ImportedRecord",
    "KeyPresence",
    "LanRecord",
    "LaunchRecord",
    "LibraryEntry",
    "LibraryRecord",
    "LogEvent",
    "MemoryBudget",
    "MemoryCheckRecord",
    "ModelRecord",
    "ModelSettingsRecord",
    "ModelState",
    "OptionRecord",
    "PlanSummary",
    "QualityCardRecord",
    "QualityEvent",
    "QualityListing",
    "QualityRunRecord",
    "RecommendationRecord",
    "RemoteRecord",
    "RemovedRecord",
    "RequestEvent",
    "RequestRecord",
    "SampleEvent",
    "SavedSettingsAnswer",
    "SeriesAnswer",
    "SeriesRecord",
    "ServiceEvent",
    "SettingsAnswer",
    "SettingsFree",
    "SnapshotEvent",
    "StartupEvent",
    "StartupFacts",
    "StartupRecord",
    "TlsRecord",
    "TokenPresence",
    "VerdictRecord",
    "event_from_json",
    "library_from_json",
    "model_from_json",
]
