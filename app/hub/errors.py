"""Hub failures as messages a user can act on: what happened, and what to do about it."""

from __future__ import annotations

import httpx
import httpx2
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
HUB_FAILURES = (httpx2.HTTPError, httpx.HTTPError, OSError)
OFFLINE_MESSAGE = "offline: search and download need the network; everything else works"


class HubError(Exception):
    """A Hub operation failed; the message says what to do. `retryable` marks failures worth another try; `kind`
    (gated, not_found, rate_limited, variant_required, bad_name) lets a caller answer with the matching HTTP status."""

    def __init__(
        self, message: str, *, retryable: bool = False, retry_after_s: float | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.kind = kind


class OfflineError(HubError):
    """The Hub cannot be reached at all."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(OFFLINE_MESSAGE + (f" ({detail})" if detail else ""), retryable=True)


def model_page(endpoint: str, repo_id: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo_id}"


def gated_message(endpoint: str, repo_id: str, has_token: bool) -> str:
    accept = f"accept the license at {model_page(endpoint, repo_id)}, then retry"
    if has_token:
        return f"{repo_id} is gated and your Hugging Face token has no access yet: {accept}"
    return f"{repo_id} is gated: save a Hugging Face token with `modeldeck hf-token set`, {accept}"


def for_status(
    status: int, endpoint: str, repo_id: str, has_token: bool, error_code: str | None, retry_after: str | None
) -> HubError:
    """The error for an HTTP answer of the Hub, with its X-Error-Code when it sent one."""
    if error_code == "GatedRepo":
        return HubError(gated_message(endpoint, repo_id, has_token), kind="gated")
    if status == 401 and not has_token:
        return HubError(
            f"{repo_id} was not found, or it is private: check the name at {model_page(endpoint, repo_id)}, "
            "or save a Hugging Face token with `modeldeck hf-token set`",
            kind="not_found",
        )
    if status == 401:
        return HubError("the Hub refused your Hugging Face token: save a valid one with `modeldeck hf-token set`")
    if status == 403:
        return HubError(f"your Hugging Face token may not read {repo_id}: check its permissions, then retry")
    if status == 404 and error_code == "EntryNotFound":
        return HubError(
            f"that file is not in {repo_id}: see the list of files at {model_page(endpoint, repo_id)}", kind="not_found"
        )
    if status == 404:
        return HubError(f"{repo_id} was not found on the Hub: check the name (organization/model)", kind="not_found")
    if status == 429:
        wait = _seconds(retry_after)
        return HubError(
            "the Hub is limiting requests (429): wait a minute, then retry",
            retryable=True,
            retry_after_s=wait,
            kind="rate_limited",
        )
    if status >= 500:
        return HubError(f"the Hub answered {status}; it may be down for a moment, retry later", retryable=True)
    return HubError(f"the Hub answered {status} for {repo_id}")


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date; the caller's own backoff is good enough


def translate(exc: Exception, endpoint: str, repo_id: str, has_token: bool) -> HubError:
    """The HubError for an exception raised by huggingface_hub or by an HTTP client talking to the Hub."""
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, GatedRepoError):
        return HubError(gated_message(endpoint, repo_id, has_token), kind="gated")
    if isinstance(exc, RemoteEntryNotFoundError):
        return HubError(
            f"that file is not in {repo_id}: see the list of files at {model_page(endpoint, repo_id)}", kind="not_found"
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{repo_id} has no such revision", kind="not_found")
    if isinstance(exc, HfHubHTTPError):
        response = exc.response
        status = response.status_code if response is not None else 0
        headers = response.headers if response is not None else {}
        if isinstance(exc, RepositoryNotFoundError) and status not in (401, 403):
            status = 404
        return for_status(status, endpoint, repo_id, has_token, headers.get("X-Error-Code"), headers.get("Retry-After"))
    if isinstance(exc, OfflineModeIsEnabled):
        return OfflineError("HF_HUB_OFFLINE is set")
    if isinstance(exc, httpx2.ConnectError | httpx.ConnectError | ConnectionRefusedError):
        return OfflineError()
    return HubError(f"network error talking to the Hub: {exc}", retryable=True)
