"""`modeldeck completion bash|zsh|fish`: a shell completion script, generated from the argument parser itself, so
that it completes exactly the commands, options and choices `modeldeck` accepts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from app.cli.invocation import Invocation

SHELLS = ("bash", "zsh", "fish")
FUNCTION = "_modeldeck_complete"


@dataclass
class CommandNode:
    """One command's words: its subcommands, its options, and the choices of each option or positional."""

    subcommands: dict[str, CommandNode] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)  # flag -> help
    option_choices: dict[str, list[str]] = field(default_factory=dict)
    positional_choices: list[str] = field(default_factory=list)

    def words(self) -> list[str]:
        return [*self.subcommands, *self.positional_choices, *self.options]


def command_tree(parser: argparse.ArgumentParser) -> CommandNode:
    node = CommandNode()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node.subcommands[name] = command_tree(sub)
        elif action.option_strings:
            for flag in action.option_strings:
                node.options[flag] = action.help or ""
                if action.choices is not None:
                    node.option_choices[flag] = [str(choice) for choice in action.choices]
        elif action.choices is not None:
            node.positional_choices += [str(choice) for choice in action.choices]
    return node


def _paths(node: CommandNode, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], CommandNode]]:
    found = [(prefix, node)]
    for name, sub in node.subcommands.items():
        found += _paths(sub, (*prefix, name))
    return found


def bash_script(root: CommandNode) -> str:
    every = _paths(root)
    nested = [" ".join(path) for path, _ in every if path]
    choices = [
        f'        "{" ".join(path)}|{flag}") words="{" ".join(values)}" ;;'
        for path, node in every
        for flag, values in node.option_choices.items()
    ]
    by_path = [f'            "{" ".join(path)}") words="{" ".join(node.words())}" ;;' for path, node in every]
    return "\n".join([
        "# modeldeck completion for bash: eval \"$(modeldeck completion bash)\" (e.g. in ~/.bashrc)",
        f"{FUNCTION}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" path="" word words=""',
        '    for word in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do',
        '        case "${path:+$path }$word" in',
        f"            {'|'.join(f'{chr(34)}{p}{chr(34)}' for p in nested)}) path=\"${{path:+$path }}$word\" ;;",
        "        esac",
        "    done",
        '    case "$path|$prev" in',
        *choices,
        "        *)",
        '            case "$path" in',
        *by_path,
        "            esac ;;",
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        f"complete -o default -F {FUNCTION} modeldeck",
        "",
    ])  # fmt: skip


def zsh_script(root: CommandNode) -> str:
    # zsh runs bash completion functions through bashcompinit: one generated completion for both shells.
    return "\n".join([
        "# modeldeck completion for zsh: eval \"$(modeldeck completion zsh)\" (e.g. in ~/.zshrc)",
        "autoload -U +X compinit && compinit",
        "autoload -U +X bashcompinit && bashcompinit",
        bash_script(root).split("\n", 1)[1],
    ])  # fmt: skip


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def fish_script(root: CommandNode) -> str:
    lines = ["# modeldeck completion for fish: modeldeck completion fish > ~/.config/fish/completions/modeldeck.fish",
             "complete -c modeldeck -f"]  # fmt: skip
    for path, node in _paths(root):
        if path:
            condition = f"__fish_seen_subcommand_from {path[-1]}"
            if node.subcommands:
                condition += f"; and not __fish_seen_subcommand_from {' '.join(node.subcommands)}"
        else:
            condition = "__fish_use_subcommand"
        if node.subcommands or node.positional_choices:
            words = " ".join([*node.subcommands, *node.positional_choices])
            lines.append(f"complete -c modeldeck -n {_fish_quote(condition)} -a {_fish_quote(words)}")
        for flag, help_text in node.options.items():
            kind = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
            values = node.option_choices.get(flag)
            extra = f" -xa {_fish_quote(' '.join(values))}" if values else ""
            description = help_text.split(" (")[0][:60]
            lines.append(
                f"complete -c modeldeck -n {_fish_quote(condition)} {kind}{extra} -d {_fish_quote(description)}"
            )
    return "\n".join([*lines, ""])


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    root = command_tree(parser)
    return {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}[shell](root)


def add_completion_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    completion = commands.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    completion.add_argument("shell", choices=SHELLS)
    completion.set_defaults(func=_print_script)


def _print_script(args: argparse.Namespace, invocation: Invocation) -> int:
    print(completion_script(invocation.parser, args.shell), end="")
    return 0
