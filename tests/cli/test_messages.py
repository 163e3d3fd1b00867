"""Issue 28 item 12, "Messages and help": what a user reads is true, one line, and names what they can act on
(no internals: ``ref=None``, builtin exception class names, temporary file names)."""

from __future__ import annotations

import json

from tests.cache_trees import local_factors, make_native_tree


def _bundle(tmp_path, cli, keys, name="b", **overrides):
    src = make_native_tree(tmp_path / f"src-{name}", layers=3, factors=local_factors(**overrides))
    out = tmp_path / f"{name}.ctb"
    assert cli("pack", src, "-o", out, "--sign-key", keys["priv"]).rc == 0
    return out


def test_diff_exit_code_json_carries_error_differs_and_a_complete_message(tmp_path, cli, keys):
    """`diff --exit-code --json` with differences exited 10 with no `error` field and a message ending in `:`."""
    a = _bundle(tmp_path, cli, keys, "a")
    b = _bundle(tmp_path, cli, keys, "b", **{"config.model_config.num_hidden_layers": 32})
    r = cli("diff", a, b, "--exit-code", "--json")
    doc = json.loads(r.out)
    assert r.rc == 10 and doc["exit_code"] == 10 and doc["ok"] is False
    assert doc["error"] == "differs", doc
    msg = doc["message"]
    assert "\n" not in msg and not msg.endswith(":") and "num_hidden_layers" in msg, msg
    # without --exit-code the same differences are a success (exit 0): no error field
    doc = json.loads(cli("diff", a, b, "--json").out)
    assert doc["ok"] is True and "error" not in doc


# ---------------------------------------------------------------------------------- 9: no internals in messages
def test_pull_outcome_line_omits_fields_that_are_none():
    """A flag click refused before any ref was read: the outcome line said `ref=None ... code=...`."""
    from cachetool.errors import UsageError
    from cachetool.transfer.pull_policy import failure_outcome

    line = failure_outcome(None, "fail", UsageError("no such option: --bogus")).line()
    assert "None" not in line and line.startswith("pull: outcome=usage-error exit=2 "), line
    assert "reason=no such option: --bogus" in line


def test_a_builtin_exception_class_name_is_not_shown(tmp_path):
    """`not a PEM or ssh-ed25519 public key (ValueError)`: the class name of a Python builtin says nothing to a
    user; what went wrong does."""
    import pytest

    from cachetool.bundle.signing import load_public_key
    from cachetool.errors import UsageError, cause

    bad = tmp_path / "k.pub"
    bad.write_text("-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n")
    with pytest.raises(UsageError) as e:
        load_public_key(bad)
    assert "Error" not in e.value.message and "(" in e.value.message, e.value.message
    assert cause(ConnectionResetError()) == "connection reset"
    assert cause(ConnectionResetError(104, "Connection reset by peer")) == "Connection reset by peer"
    assert cause(KeyError("layers")) == "no 'layers'"
    assert cause(EOFError()) == "unexpected end of file"
    assert cause(ValueError("bad digest"), detail=True) == "bad digest"


def test_a_manifest_that_is_not_json_names_no_builtin_class():
    import pytest

    from cachetool.bundle.manifest import Manifest
    from cachetool.errors import ManifestError

    for data in (b"\xff{}", b"{not json"):
        with pytest.raises(ManifestError) as e:
            Manifest.from_bytes(data)
        assert "UnicodeDecodeError" not in e.value.message and "JSONDecodeError" not in e.value.message


def test_os_error_lines_name_the_destination_not_a_staging_or_temp_file(tmp_path):
    """An install that failed inside its staging folder named `.cachetool-staging-xxxx/tree/...`, an atomic write
    its temp file `.name.abc123.tmp`: the user knows neither; the file they asked for is what the line names."""
    import errno

    from cachetool.errors import os_error_line
    from cachetool.install.fs import fs_error

    root = tmp_path / "root"
    staged = OSError(errno.EACCES, "Permission denied", f"{root}/.cachetool-staging-k3j9x_2a/tree/abc/rank_0_0/x.bin")
    for line in (os_error_line(staged, "pull"), fs_error(staged, root, "install").message):
        assert ".cachetool-staging" not in line and "tree/" not in line, line
        assert "abc/rank_0_0/x.bin" in line and "Permission denied" in line, line
    tmp = OSError(errno.EROFS, "Read-only file system", f"{tmp_path}/store/.refs.json.x8k2m1qz.tmp")
    line = os_error_line(tmp, "push")
    assert ".tmp" not in line and line == f"push: {tmp_path}/store/refs.json: Read-only file system", line


# ---------------------------------------------------------------------------------- 11: a bad logging level
def test_a_logging_level_that_is_not_one_is_a_usage_error(tmp_path, cli, monkeypatch):
    """CACHETOOL_LOGGING_LEVEL=LOUD was taken silently (INFO); it is a configuration mistake: one line, exit 2,
    naming the variable and the levels it takes; `debug` in any case still works."""
    import pytest

    from compiler import envs
    from compiler.errors import CONFIG, CompilerError

    monkeypatch.setenv("CACHETOOL_LOGGING_LEVEL", "LOUD")
    r = cli("ls", f"file://{tmp_path}/store", "--json")
    assert r.rc == 2, r
    line = [x for x in r.err.splitlines() if x.startswith("error: ")]
    assert len(line) == 1 and "CACHETOOL_LOGGING_LEVEL" in line[0] and "'LOUD'" in line[0], r.err
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in line[0], line
    assert json.loads(r.out)["error"] == "usage-error"
    with pytest.raises(CompilerError) as e:  # an embedder of the compiler is told too, by kind
        envs.logging_level()
    assert e.value.kind == CONFIG and "CACHETOOL_LOGGING_LEVEL" in str(e.value)
    monkeypatch.setenv("CACHETOOL_LOGGING_LEVEL", "debug")
    assert envs.logging_level() == "DEBUG"
    assert cli("ls", f"file://{tmp_path}/store").rc != 2


# ---------------------------------------------------------------------------------- 10: a known scheme, a bad separator
def test_a_known_scheme_with_a_malformed_separator_says_so():
    """`s3:/bad` was "no scheme": it has one, with one slash; the message says what the scheme's ref looks like."""
    import pytest

    from cachetool.errors import UsageError
    from cachetool.stores.addresses import parse_ref, parse_store, parse_store_or_ref

    for text, expected in (
        ("s3:/bad", "s3://bucket/prefix/name:tag"),
        ("S3:bucket/x:v1", "s3://bucket/prefix/name:tag"),
        ("file:/abs/dir/x:v1", "file:///dir/name:tag"),
        ("oci:/host/repo:v1", "oci://host[:port]/repo:tag"),
        ("s3:\\\\bucket\\x", "s3://bucket/prefix/name:tag"),
    ):
        with pytest.raises(UsageError) as e:
            parse_ref(text)
        msg = e.value.message
        assert "no scheme" not in msg and f"{text}: expected {expected}" in msg, msg
    with pytest.raises(UsageError) as e:
        parse_store("s3:/bucket")
    assert "s3:/bucket: expected s3://bucket/prefix" in e.value.message and ":tag" not in e.value.message
    with pytest.raises(UsageError) as e:
        parse_store_or_ref("oci:/host")
    assert "expected oci://host[:port]/repo" in e.value.message
    with pytest.raises(UsageError) as e:  # no scheme at all is still that
        parse_ref("bucket/x:v1")
    assert "no scheme" in e.value.message


# ---------------------------------------------------------------------------------- 1: hints name the verb's flags
def _flags(verb: str) -> set[str]:
    from cachetool.cli import _load_commands, cli as group

    _load_commands()
    return {o for p in group.commands[verb].params for o in getattr(p, "opts", ())}


def test_an_unsigned_bundle_hint_names_only_flags_the_verb_has(tmp_path, cli, keys):
    """`verify` of an unsigned bundle suggested --insecure-skip-verify, which verify refuses as no such option."""
    import re

    src = make_native_tree(tmp_path / "src", layers=2, factors=local_factors())
    ctb = tmp_path / "u.ctb"
    assert cli("pack", src, "-o", ctb).rc == 0
    for verb, args in (
        ("verify", [ctb, "--trust", keys["pub"]]),
        ("install", [ctb, "--cache-root", tmp_path / "root", "--trust", keys["pub"]]),
    ):
        r = cli(verb, *args)
        assert r.rc == 3, r
        line = [x for x in r.err.splitlines() if x.startswith("error: ")][-1]
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
        assert named <= _flags(verb), (verb, named - _flags(verb), line)
        assert "not signed" in line
    assert "--insecure-skip-verify" in line  # install has the flag: it is still offered


# ---------------------------------------------------------------------------------- 2: re-push of an unsigned copy
def test_a_repush_of_an_unsigned_copy_is_not_called_unsigned_when_the_store_holds_its_signature(tmp_path, cli, keys):
    """The store already held a signature for the manifest (an earlier signed push): pull accepts the ref, yet the
    push of an unsigned copy warned that the ref is UNSIGNED and pull refuses it."""
    from cachetool.bundle.ctb import open_ctb, write_ctb

    signed = _bundle(tmp_path, cli, keys, "s")
    unsigned = tmp_path / "u.ctb"
    with open_ctb(signed) as b:
        write_ctb(b.with_signature(None), unsigned)
    store = f"file://{tmp_path}/store"
    lone = cli("push", unsigned, f"{store}/other:v1", "--json")  # nothing signed it anywhere: the warning stands
    assert lone.rc == 0 and "UNSIGNED" in lone.err and json.loads(lone.out)["signed"] is False, lone
    first = cli("push", signed, f"{store}/m:v1")
    assert first.rc == 0 and "UNSIGNED" not in first.err, first
    again = cli("push", unsigned, f"{store}/m:v2", "--json")
    assert again.rc == 0 and "UNSIGNED" not in again.err, again
    assert json.loads(again.out)["signed"] is True
    pulled = cli("pull", f"{store}/m:v2", "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert pulled.rc == 0, pulled  # as the push said: the ref is signed


# ---------------------------------------------------------------------------------- 4-8: help that is true
def _option(verb: str, flag: str):
    from cachetool.cli import _load_commands, cli as group

    _load_commands()
    return next(p for p in group.commands[verb].params if flag in getattr(p, "opts", ()))


def _help_line(cli, verb: str, flag: str) -> str:
    """The option's entry in `cachetool VERB --help`, as a person reads it (wrapped lines joined)."""
    import re

    out = cli(verb, "--help").out
    start = out.index(f"  {flag}") if f"  {flag}" in out else out.index(f", {flag}")
    block = out[start:].split("\n  -", 1)[0]
    return re.sub(r"\s+", " ", block)


def test_install_cache_root_help_names_no_engine_flag(cli):
    """install --cache-root's help told of --engine vllm, a flag install has not."""
    assert "--engine" not in _help_line(cli, "install", "--cache-root")
    assert "--engine vllm" in _help_line(cli, "pull", "--cache-root")  # pull has --engine: its help says it


def test_device_help_is_one_wording_true_for_each_verb(cli):
    """--device's default was told three ways (show_default, "(default: ...)", none) and warm said "cpu or cuda"
    although it takes cuda:N like the others."""
    import re

    lines = {v: _help_line(cli, v, "--device") for v in ("warm", "check", "install", "pull", "diff")}
    for verb, line in lines.items():
        assert "cpu, cuda or cuda:N" in line, (verb, line)
        assert len(re.findall(r"default", line)) == 1 and "(default: " in line, (verb, line)
    assert "(default: cpu)" in lines["warm"] and "(default: cpu)" in lines["check"]
    assert "(default: the bundle's)" in lines["install"]


def test_require_hit_help_gives_both_codes(cli):
    line = _help_line(cli, "check", "--require-hit")
    assert "8" in line and "4" in line and "--engine vllm" in line, line


def test_defaults_are_shown_as_a_person_reads_them(cli):
    """pull --workers showed no default; gc --older-than showed 3600.0."""
    workers = _help_line(cli, "pull", "--workers")
    assert "default:" in workers and "CPU" in workers, workers
    older = _help_line(cli, "gc", "--older-than")
    assert "3600.0" not in older and "1 hour" in older, older


# ---------------------------------------------------------------------------------- 12: the AOT entry's progress
def test_the_aot_entry_save_does_not_read_as_pieces_reused(tmp_path, monkeypatch):
    """After the compile, warm printed "piece i/5 reused (identical to one done)" five times: that was the AOT entry
    being saved (a second capture that takes each compiled piece), which the lines now say."""
    from compiler import compiler_interface, piecewise_backend, progress
    from compiler.config import CompilationConfig
    from compiler.runner import ModelRunner

    monkeypatch.setattr(piecewise_backend, "InductorStandaloneAdaptor", compiler_interface.EagerAdaptor)
    monkeypatch.setenv("CACHETOOL_CACHE_ROOT", str(tmp_path / "root"))
    events: list = []
    with progress.listening(events.append):
        ModelRunner("tiny", "cpu", CompilationConfig(), max_num_batched_tokens=8).warmup()
    kinds = [e.kind for e in events]
    assert progress.SAVE in kinds, [str(e) for e in events]
    after = [e for e in events[kinds.index(progress.SAVE) + 1 :] if e.kind == progress.PIECE]
    assert after, [str(e) for e in events]
    for e in after:
        assert "reused" not in e.message and "AOT entry" in e.message and e.fields["action"] == "aot_entry", e
    before = [e for e in events[: kinds.index(progress.SAVE)] if e.kind == progress.PIECE]
    assert {e.fields["action"] for e in before} == {"compiled", "reused"}
