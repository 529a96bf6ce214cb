"""The control API's typed calls: one method per route, each answer typed as app.api_types describes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.api_types import (
    AboutRecord,
    BenchCardRecord,
    BenchListing,
    BenchRunRecord,
    DeletedRecord,
    DownloadRecord,
    EndpointRecord,
    EngineBuildListing,
    EngineBuildRecord,
    HardwareRecord,
    HealthRecord,
    HubModelPage,
    HubSearchResult,
    ImportedRecord,
    LibraryRecord,
    ModelRecord,
    ModelSettingsRecord,
    QualityCardRecord,
    QualityListing,
    QualityRunRecord,
    RecommendationRecord,
    RemoteRecord,
    RemovedRecord,
    RequestRecord,
    SavedSettingsAnswer,
    SeriesAnswer,
    SettingsAnswer,
    VerdictRecord,
    library_from_json,
    model_from_json,
)
from app.client.http import ControlConnection, ControlError, segment
from app.client.streams import EventStream

HUB_TIMEOUT_S = 60.0  # the Hub may be slow; the service answers at once when it is unreachable
# The first hardware detection initialises NVML, and a recommendation reads model headers: allow more than a ping.
PLANNING_TIMEOUT_S = 30.0


class ControlClient(ControlConnection):
    """Synchronous client of the control API. Blocking: call it off the GUI thread."""

    def health(self) -> HealthRecord:
        result: HealthRecord = self._call("GET", "/api/health", timeout=2.0)
        return result

    def about(self) -> AboutRecord:
        """The service's version and commit, and each engine's installation (GET /api/about)."""
        result: AboutRecord = self._call("GET", "/api/about", timeout=120.0)
        return result

    def models(self) -> list[ModelRecord]:
        return [self._model(raw) for raw in self._call("GET", "/api/models")]

    def endpoint(self) -> EndpointRecord:
        result: EndpointRecord = self._call("GET", "/api/endpoint")
        return result

    def start_model(
        self, model_id: str, wait: bool = False, overrides: Mapping[str, int | str] | None = None
    ) -> ModelRecord:
        """Start a model; `overrides` (context, gpu_layers, threads, batch, engine, parallel) replace the default
        plan's values.

        A model already running with other values is not restarted: the service answers with an error.
        """
        params = {"wait": "1"} if wait else None
        body = dict(overrides) if overrides is not None else None
        return self._model(
            self._call("POST", f"/api/models/{segment(model_id)}/start", params=params, json=body, timeout=None)
        )

    def model_settings(self, model_id: str) -> ModelSettingsRecord:
        """The model's saved load settings, the plan they make, the memory it needs and what is free (GET)."""
        result: ModelSettingsRecord = self._call(
            "GET", f"/api/models/{segment(model_id)}/settings", timeout=PLANNING_TIMEOUT_S
        )
        return result

    def save_model_settings(self, model_id: str, settings: Mapping[str, int | str]) -> ModelSettingsRecord:
        """Keep these load settings for every later start of the model; an empty mapping forgets them (PUT)."""
        result: ModelSettingsRecord = self._call(
            "PUT", f"/api/models/{segment(model_id)}/settings", json=dict(settings), timeout=PLANNING_TIMEOUT_S
        )
        return result

    def estimate_model_settings(self, model_id: str, settings: Mapping[str, int | str]) -> ModelSettingsRecord:
        """What `model_settings` would answer for these settings, without saving them."""
        result: ModelSettingsRecord = self._call(
            "POST",
            f"/api/models/{segment(model_id)}/settings/estimate",
            json=dict(settings),
            timeout=PLANNING_TIMEOUT_S,
        )
        return result

    def hardware(self) -> HardwareRecord:
        """The service machine's hardware profile (CPU, memory, GPUs, and why a GPU cannot be used)."""
        result: HardwareRecord = self._call("GET", "/api/hardware", timeout=PLANNING_TIMEOUT_S)
        return result

    def recommend(self, model_id: str, use: str = "chat", users: int | None = None) -> RecommendationRecord:
        """How to run a model for a use (chat, serve, long-context): the best option, alternatives, reasons."""
        params: dict[str, str | int] = {"model": model_id, "use": use}
        if users is not None:
            params["users"] = users
        result: RecommendationRecord = self._call("GET", "/api/recommend", params=params, timeout=PLANNING_TIMEOUT_S)
        return result

    def stop_model(self, model_id: str) -> ModelRecord:
        return self._model(self._call("POST", f"/api/models/{segment(model_id)}/stop", timeout=60.0))

    def _model(self, raw: Any) -> ModelRecord:
        try:
            return model_from_json(raw)
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def logs(self, model_id: str, tail: int = 200) -> list[str]:
        result: list[str] = self._call("GET", f"/api/models/{segment(model_id)}/logs", params={"tail": tail})["lines"]
        return result

    # The Hub and the library -------------------------------------------------------------------------------

    def hub_search(
        self, query: str, sort: str = "downloads", limit: int = 20, model_format: str = "gguf"
    ) -> list[HubSearchResult]:
        """`model_format` is gguf (llama.cpp) or safetensors (vLLM)."""
        params = {"q": query, "sort": sort, "limit": limit, "format": model_format}
        result: list[HubSearchResult] = self._call("GET", "/api/hub/search", params=params, timeout=HUB_TIMEOUT_S)
        return result

    def hub_model(self, repo_id: str) -> HubModelPage:
        """A Hub model's page: files, variants, license, gated, and the variant suggested for this machine."""
        result: HubModelPage = self._call("GET", f"/api/hub/models/{repo_id}", timeout=HUB_TIMEOUT_S)
        return result

    def start_download(self, repo_id: str, variant: str | None = None, filename: str | None = None) -> DownloadRecord:
        body = {"repo": repo_id, "variant": variant, "file": filename}
        result: DownloadRecord = self._call("POST", "/api/downloads", json=body, timeout=HUB_TIMEOUT_S)
        return result

    def downloads(self) -> list[DownloadRecord]:
        result: list[DownloadRecord] = self._call("GET", "/api/downloads")
        return result

    def control_download(self, download_id: str, action: str) -> DownloadRecord:
        """`action` is pause, resume or cancel."""
        result: DownloadRecord = self._call("POST", f"/api/downloads/{download_id}/{action}", timeout=60.0)
        return result

    def library(self) -> LibraryRecord:
        """Every model with its size on disk and origin, and the free space where models are kept."""
        try:
            return library_from_json(self._call("GET", "/api/library", timeout=30.0))
        except ValueError as exc:
            raise ControlError(str(exc)) from None

    def verify_model(self, model_id: str) -> VerdictRecord:
        # Hashing a multi-gigabyte file takes as long as the disk needs.
        result: VerdictRecord = self._call("POST", f"/api/library/{segment(model_id)}/verify", timeout=None)
        return result

    def delete_model(self, model_id: str) -> DeletedRecord:
        result: DeletedRecord = self._call("DELETE", f"/api/library/{segment(model_id)}", timeout=60.0)
        return result

    def import_model(self, path: str, link: bool = False) -> ImportedRecord:
        """Copy a GGUF file (a path on the service's machine) into the library, after its header is checked; with
        `link`, hard-link it where the disk allows."""
        body = {"path": path, "link": True} if link else {"path": path}
        result: ImportedRecord = self._call("POST", "/api/library/import", json=body, timeout=None)
        return result

    def remotes(self) -> list[RemoteRecord]:
        """The remote endpoints: name, URL, their models as served here, whether a key is kept (never the key)."""
        result: list[RemoteRecord] = self._call("GET", "/api/remotes")
        return result

    def add_remote(self, name: str, url: str, api_key: str | None = None) -> RemoteRecord:
        """Register an OpenAI-compatible server elsewhere; it must list its models now (ControlError 502 if not)."""
        body = {"name": name, "url": url} | ({"api_key": api_key} if api_key else {})
        result: RemoteRecord = self._call("POST", "/api/remotes", json=body, timeout=30.0)
        return result

    def remove_remote(self, name: str) -> RemovedRecord:
        result: RemovedRecord = self._call("DELETE", f"/api/remotes/{name}")
        return result

    def series(
        self, window_s: int, names: list[str] | None = None, model: str | None = None, max_points: int | None = None
    ) -> SeriesAnswer:
        """Metric series over the last `window_s` seconds: {now, interval_s, sampler, series: [{name, labels, t, v}]}.

        Points are 1 s apart for windows up to an hour and minute averages beyond; `names` and `model` narrow it.
        """
        params: dict[str, str | int] = {"window": window_s}
        if names:
            params["names"] = ",".join(names)
        if model is not None:
            params["model"] = model
        if max_points is not None:
            params["max_points"] = max_points
        result: SeriesAnswer = self._call("GET", "/api/series", params=params)
        return result

    def requests(self, limit: int = 100) -> list[RequestRecord]:
        """The latest request records of the gateway, oldest first."""
        result: list[RequestRecord] = self._call("GET", "/api/requests", params={"limit": limit})
        return result

    # Settings and secrets ---------------------------------------------------------------------------------

    def settings(self) -> SettingsAnswer:
        """{settings, running, restart_required, problem, api_key: {present, source}, hf_token: {set, source},
        lan: {addresses, warning, port}}. Reads the keyring on the service's side, so allow it time."""
        result: SettingsAnswer = self._call("GET", "/api/settings", timeout=30.0)
        return result

    def update_settings(self, changes: Mapping[str, object], confirm_lan_exposure: bool = False) -> SavedSettingsAnswer:
        """Save some settings; the answer is `settings()`'s plus `changed`. A bad value is a ControlError (400);
        a non-loopback bind address needs `confirm_lan_exposure` and an endpoint with a key (409 otherwise)."""
        body = {**changes, "confirm_lan_exposure": True} if confirm_lan_exposure else dict(changes)
        result: SavedSettingsAnswer = self._call("PUT", "/api/settings", json=body, timeout=30.0)
        return result

    def regenerate_api_key(self) -> EndpointRecord:
        """A new API key for the endpoint, in use at once: the answer is `endpoint()`'s."""
        result: EndpointRecord = self._call("POST", "/api/key/regenerate", timeout=30.0)
        return result

    def set_hf_token(self, token: str) -> None:
        """Keep the Hugging Face token in the service machine's OS keyring. It is never sent back."""
        self._call("PUT", "/api/hf-token", json={"token": token}, timeout=30.0)

    def clear_hf_token(self) -> bool:
        """Remove the Hugging Face token; False when none was saved."""
        return bool(self._call("DELETE", "/api/hf-token", timeout=30.0)["removed"])

    # Benchmarks -----------------------------------------------------------------------------------------------

    def start_bench(
        self,
        model_id: str,
        concurrency: list[int],
        prompt_tokens: int,
        output_tokens: int,
        requests: int | None = None,
        **prompts: int | str | None,
    ) -> BenchRunRecord:
        """Start a benchmark on the service (one at a time); its progress comes as `bench` events. `prompts` are
        the other fields of POST /api/bench: prompt_mode, prefix_tokens, conversations, turns, seed (None: the
        service's default)."""
        body: dict[str, object] = {"model": model_id, "concurrency": concurrency, "prompt_tokens": prompt_tokens,
                                "output_tokens": output_tokens}  # fmt: skip
        if requests is not None:
            body["requests"] = requests
        body.update({name: value for name, value in prompts.items() if value is not None})
        result: BenchRunRecord = self._call("POST", "/api/bench", json=body)
        return result

    def bench(self) -> BenchListing:
        """{run: the running or last benchmark (None before the first), cards: saved cards, newest first}."""
        result: BenchListing = self._call("GET", "/api/bench", timeout=30.0)
        return result

    def cancel_bench(self) -> BenchRunRecord:
        result: BenchRunRecord = self._call("POST", "/api/bench/cancel", timeout=30.0)
        return result

    def bench_card(self, card_id: str) -> BenchCardRecord:
        result: BenchCardRecord = self._call("GET", f"/api/bench/cards/{segment(card_id)}")
        return result

    def compare_bench_cards(self, first: str, second: str) -> list[list[str]]:
        """Two cards side by side as rows [what, first's value, second's value]."""
        result: list[list[str]] = self._call("GET", "/api/bench/compare", params={"a": first, "b": second})["rows"]
        return result

    def start_quality(self, model_id: str, **fields: Any) -> QualityRunRecord:
        """Start a quality run (one at a time); `fields`: variants, reference, data, tokens of POST /api/quality.
        Its progress comes as `quality` events."""
        body = {"model": model_id, **{name: value for name, value in fields.items() if value is not None}}
        result: QualityRunRecord = self._call("POST", "/api/quality", json=body)
        return result

    def quality(self) -> QualityListing:
        """{run: the running or last quality run (None before the first), cards: saved cards, newest first}."""
        result: QualityListing = self._call("GET", "/api/quality", timeout=30.0)
        return result

    def cancel_quality(self) -> QualityRunRecord:
        result: QualityRunRecord = self._call("POST", "/api/quality/cancel", timeout=30.0)
        return result

    def quality_card(self, card_id: str) -> QualityCardRecord:
        result: QualityCardRecord = self._call("GET", f"/api/quality/cards/{segment(card_id)}")
        return result

    def compare_quality_cards(self, first: str, second: str) -> list[list[str]]:
        """Two quality cards side by side as rows [what, first's value, second's value]."""
        rows: list[list[str]] = self._call("GET", "/api/quality/compare", params={"a": first, "b": second})["rows"]
        return rows

    def start_engine_build(self, engine: str = "llama-server") -> EngineBuildRecord:
        """Build an engine on the service's machine (one build at a time: 409 while one runs). Its progress comes
        as `engine_build` events."""
        result: EngineBuildRecord = self._call("POST", f"/api/engines/{engine}/build")
        return result

    def engine_builds(self) -> EngineBuildListing:
        """{build: the running or last engine build, None before the first}."""
        result: EngineBuildListing = self._call("GET", "/api/engines/builds")
        return result

    def cancel_engine_build(self, engine: str = "llama-server") -> EngineBuildRecord:
        """Cancel the running build; it answers once the compiler is gone."""
        result: EngineBuildRecord = self._call("POST", f"/api/engines/{engine}/build/cancel", timeout=30.0)
        return result

    def shutdown(self) -> None:
        self._call("POST", "/api/shutdown")

    def events(self) -> EventStream:
        """Live events (a snapshot, then engine states and log lines) until the service goes away."""
        return EventStream(self.address)
