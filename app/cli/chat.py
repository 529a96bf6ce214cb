"""`modeldeck run MODEL [PROMPT]`: one streamed answer, or a chat in the terminal, through the service's endpoint.

In a chat a line ending in a backslash continues on the next line, and text between two lines of triple quotes
(`\"\"\"`) is one message; `/bye` (or end of input) leaves, `/clear` forgets the conversation. Ctrl-C stops the
answer being written, not the chat.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from app.api_types import EndpointRecord
from app.cli.invocation import Invocation
from app.cli.models import SPECULATION, add_speculation_options, start_and_wait
from app.cli.numbers import positive
from app.cli.service_link import service_on_demand
from app.client import ControlError, ServiceUnavailable, stream_chat

COMMAND = "run"
BLOCK = '"""'
HELP = 'Type a message; end a line with \\ to go on, or put it between lines of """. /clear forgets, /bye leaves.'


def add_chat_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(COMMAND, help="chat with a model in the terminal, or print one answer to PROMPT")
    run.add_argument("model", metavar="MODEL", help="a model id from `modeldeck models`")
    run.add_argument("prompt", nargs="?", metavar="PROMPT", help="answer this and exit (default: a chat)")
    run.add_argument("--max-tokens", type=positive, default=1024, metavar="N", help="longest answer in tokens (1024)")
    add_speculation_options(run)
    run.set_defaults(func=run_chat)


@dataclass
class Conversation:
    """The messages so far; an answer joins it once it is written, whole or stopped."""

    messages: list[dict[str, str]] = field(default_factory=list)

    def ask(self, text: str) -> list[dict[str, str]]:
        self.messages.append({"role": "user", "content": text})
        return self.messages

    def answered(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def read_message(read_line: Callable[[str], str | None]) -> str | None:
    """The next message: one line, lines joined by a trailing backslash, or a triple-quoted block; None at end of
    input. `read_line(prompt)` returns a line without its newline, or None at the end."""
    line = read_line(">>> ")
    if line is None:
        return None
    if line.lstrip().startswith(BLOCK):
        lines = [line.lstrip()[len(BLOCK) :]]
        while not lines[-1].rstrip().endswith(BLOCK):
            more = read_line("... ")
            if more is None:
                break
            lines.append(more)
        lines[-1] = lines[-1].rstrip().removesuffix(BLOCK)
        return "\n".join(lines).strip("\n")
    lines = [line]
    while lines[-1].endswith("\\"):
        lines[-1] = lines[-1][:-1]
        more = read_line("... ")
        if more is None:
            break
        lines.append(more)
    return "\n".join(lines)


def run_chat(args: argparse.Namespace, invocation: Invocation) -> int:
    paths = invocation.paths
    client = service_on_demand(paths)
    try:
        speculation = {name: value for name in SPECULATION if (value := getattr(args, name)) is not None}
        start_and_wait(client, args.model, speculation or None)  # without it: the model's saved settings
        endpoint = client.endpoint()
    finally:
        client.close()
    if args.prompt is not None:
        answer = _answer(endpoint, args.model, [{"role": "user", "content": args.prompt}], args.max_tokens)
        return 1 if answer.failed else 130 if answer.stopped else 0
    return _chat(endpoint, args.model, args.max_tokens)


@dataclass(frozen=True)
class Answer:
    text: str
    stopped: bool = False  # by Ctrl-C
    failed: bool = False  # cut short by an error: the engine failed with the answer under way


def _answer(endpoint: EndpointRecord, model_id: str, messages: list[dict[str, str]], max_tokens: int) -> Answer:
    """Stream one answer to stdout; Ctrl-C stops it (what was written stays on the screen), and so does an engine
    failing under way, said on stderr. A request refused before its answer began raises ControlError; the service
    gone raises ServiceUnavailable, after ending the line of what was written."""
    stream = stream_chat(endpoint, model_id, messages, max_tokens)
    pieces: list[str] = []
    try:
        for piece in stream:
            pieces.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        stream.cancel()
        print(flush=True)
        print("(stopped)", file=sys.stderr, flush=True)
        return Answer("".join(pieces), stopped=True)
    except ControlError as exc:
        if exc.status is not None:
            raise
        print(flush=True)
        print(f"(cut short: {exc})", file=sys.stderr, flush=True)
        return Answer("".join(pieces), failed=True)
    except ServiceUnavailable:
        if pieces:
            print(flush=True)
        raise
    print(flush=True)
    return Answer("".join(pieces))


def _chat(endpoint: EndpointRecord, model_id: str, max_tokens: int) -> int:
    conversation = Conversation()
    read_line = _terminal_line if sys.stdin.isatty() else _piped_line(sys.stdin)
    if sys.stdin.isatty():
        with contextlib.suppress(ImportError):  # line editing and history at the prompt, where the platform has it
            import readline  # noqa: F401
        print(HELP)
    while True:
        try:
            text = read_message(read_line)
        except KeyboardInterrupt:  # at the prompt: drop what was typed, keep the chat
            print("\n(Ctrl-D or /bye leaves)")
            continue
        if text is None or text.strip() == "/bye":
            return 0
        if text.strip() == "/clear":
            conversation = Conversation()
            print("(the conversation is forgotten)")
            continue
        if not text.strip():
            continue
        answer = _answer(endpoint, model_id, conversation.ask(text), max_tokens)
        # A stopped or failed answer stays in the conversation as far as it went: the person saw it and may refer
        # to it (an engine that failed is restarted by the service, the next message waits for it).
        conversation.answered(answer.text)


def _terminal_line(prompt: str) -> str | None:
    try:
        return input(prompt)
    except EOFError:
        print()
        return None


def _piped_line(source: TextIO) -> Callable[[str], str | None]:
    def read(_prompt: str) -> str | None:
        line = source.readline()
        return line.removesuffix("\n") if line else None

    return read
