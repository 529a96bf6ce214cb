"""What each command's handler is given besides its arguments; every sub-command's parser names its handler with
`set_defaults(func=...)`, so `main` runs `args.func(args, invocation)` and keeps no table of commands."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from app.paths import AppPaths
from app.settings import LoadedSettings


@dataclass(frozen=True)
class Invocation:
    """ModelDeck's folders (with the settings' models folder), the settings as loaded, and the whole parser."""

    paths: AppPaths
    loaded: LoadedSettings
    parser: argparse.ArgumentParser


Handler = Callable[[argparse.Namespace, Invocation], int]
