"""Per-model load settings: the launch parameters a person chose for a model, kept in the config folder and used by
every later start of that model that names none of its own (a JIT start from the gateway, `--model` at service
start, the GUI's Launch).

One JSON file, `model-settings.json`, written atomically with mode 0600 like the rest of the config. A file that
cannot be read is set aside as `model-settings.json.bad` and the models start with their defaults: nothing is
lost that could still be recovered by hand, and the service still starts.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from app.bad_files import set_aside
from app.bounded_json import load_json
from app.service.launch.overrides import PlanOverrides
from engines.atomic_files import write_atomically

SCHEMA_VERSION = 1
FILE_NAME = "model-settings.json"

log = logging.getLogger("modeldeck.model_settings")


def settings_dict(overrides: PlanOverrides | None) -> dict[str, Any]:
    """Every field under its API name, None where nothing was chosen."""
    return asdict(overrides) if overrides is not None else {field.name: None for field in fields(PlanOverrides)}


class ModelSettingsStore:
    """The saved load settings of every model, read on first use and cached; safe to use from several threads."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / FILE_NAME
        self._lock = threading.Lock()
        self._saved: dict[str, PlanOverrides] | None = None
        self.problem: str | None = None  # why the file, or a model's entry, could not be used
        self._unusable: dict[str, Any] = {}  # entries this machine cannot use, written back as they were

    def get(self, model_id: str) -> PlanOverrides | None:
        """The model's saved settings; None when it has none (its default plan applies)."""
        with self._lock:
            return self._load().get(model_id)

    def known(self, model_id: str) -> PlanOverrides | None:
        """The model's saved settings as last read, without blocking (for the event loop): None before the file
        was first read by `get` or `put`. Each save replaces the whole mapping, so a reader sees one or the other."""
        saved = self._saved
        return saved.get(model_id) if saved is not None else None

    def put(self, model_id: str, overrides: PlanOverrides | None) -> None:
        """Save the model's settings, replacing what it had; None or an empty set forgets them."""
        with self._lock:
            saved = dict(self._load())
            self._unusable.pop(model_id, None)
            if overrides is None or overrides == PlanOverrides():
                saved.pop(model_id, None)
            else:
                saved[model_id] = overrides
            self._write(saved)
            self._saved = saved

    def _load(self) -> dict[str, PlanOverrides]:
        if self._saved is None:
            self._saved = self._read()
        return self._saved

    def _read(self) -> dict[str, PlanOverrides]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            data = load_json(raw)
            if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
                raise ValueError("it must hold a JSON object with `models`")
            if data.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema version {data.get('schema_version')!r} is not one this ModelDeck reads")
        except ValueError as exc:  # BadJson: not UTF-8, not JSON, or nested past its bound; or not our object
            bad = set_aside(self.path)
            self.problem = f"{self.path} is not valid ({exc}); kept it as {bad.name} and used the defaults"
            log.warning("model settings: %s", self.problem)
            return {}
        saved: dict[str, PlanOverrides] = {}
        for model_id, entry in data["models"].items():
            try:
                overrides = PlanOverrides.from_json(json.dumps(entry).encode())
            except ValueError as exc:  # BadOverrides: out of this machine's bounds (fewer cores), or malformed
                # Kept in the file as it is, unused, until the model's settings are saved again.
                self._unusable[str(model_id)] = entry
                self.problem = f"the saved settings of {model_id} are not usable here ({exc}); it starts with defaults"
                log.warning("model settings: %s", self.problem)
                continue
            if overrides is not None:
                saved[str(model_id)] = overrides
        return saved

    def _write(self, saved: dict[str, PlanOverrides]) -> None:
        """Atomically: readers see the old file or the new one, never a part; created 0600, never briefly wider."""
        models: dict[str, Any] = {m: e for m, e in self._unusable.items() if m not in saved}
        models |= {m: {k: v for k, v in asdict(o).items() if v is not None} for m, o in saved.items()}
        models = dict(sorted(models.items()))
        text = json.dumps({"schema_version": SCHEMA_VERSION, "models": models}, indent=2) + "\n"
        write_atomically(self.path, text)


__all__ = ["ModelSettingsStore", "settings_dict"]
