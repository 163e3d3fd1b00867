"""The help reads as written (issue 45, item 3): the top-level list cut every verb's description with "…"; gc and
prune showed ``[default: (3600 s (1 hour))]``; warm's and check's said "for MODEL" of an option; ``rm --platform``
showed TEXT where the other verbs show PLATFORM."""

from __future__ import annotations

import click
import pytest

from cachetool.cli import cli, main


def _verbs() -> dict[str, click.Command]:
    main(["--version"])  # loads the command modules
    return dict(cli.commands)


def _help(capsys, *args: str) -> str:
    capsys.readouterr()
    assert main([*args, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())


def _first_sentence(command: click.Command) -> str:
    return " ".join(command.help.strip().split("\n\n")[0].split()).split(". ")[0]


def test_the_verb_list_shows_each_description_whole(capsys):
    listing = _help(capsys).split("Commands:", 1)[1]
    assert "…" not in listing and "..." not in listing, listing
    for name, command in _verbs().items():
        assert _first_sentence(command) in listing, (name, listing)


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_a_default_said_in_words_reads_as_written(capsys, verb):
    text = _help(capsys, verb)
    assert "default: (" not in text, text


def test_gc_and_prune_give_their_age_once(capsys):
    for verb in ("gc", "prune"):
        assert "[default: 3600 s (1 hour);" in _help(capsys, verb)


def test_warm_and_check_name_the_model_by_its_option(capsys):
    for verb in ("warm", "check"):
        sentence = _first_sentence(_verbs()[verb])
        assert "--model" in sentence and "MODEL" not in sentence, sentence


def test_an_option_several_verbs_take_shows_one_metavar():
    """keygen's -o names two files (NAME and NAME.pub), pack's and sign's one: their metavars differ on purpose."""
    seen: dict[str, dict[str, list[str]]] = {}
    for name, command in _verbs().items():
        ctx = click.Context(command, info_name=name)
        for p in command.params:
            if isinstance(p, click.Option) and not p.is_flag and not (name == "keygen" and "--output" in p.opts):
                seen.setdefault(max(p.opts, key=len), {}).setdefault(p.make_metavar(ctx), []).append(name)
    assert {opt: kinds for opt, kinds in seen.items() if len(kinds) > 1} == {}
