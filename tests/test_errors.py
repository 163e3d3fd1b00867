"""The error module: one home for every class, fields on the errors, builtin bases, logged retries."""

import logging

from cachetool import errors


def test_every_error_class_lives_in_errors_and_the_raising_modules_use_it():
    # the modules that raise these import them from errors (and re-export none they do not raise: issue 22)
    from cachetool.bundle import ctb as bundle, manifest, signing
    from cachetool.stores import common

    for mod, names in [
        (signing, ["SignatureError", "UnsignedError", "UntrustedKeyError", "BadSignatureError"]),
        (manifest, ["ManifestError", "UnsupportedSchemaError"]),
        (bundle, ["BundleFormatError"]),
        (common, ["OversizeBlobError"]),
    ]:
        for name in names:
            assert getattr(mod, name) is getattr(errors, name), name
            assert getattr(errors, name).__module__ == "cachetool.errors"


def test_fields_and_message():
    e = errors.NotFoundError("gone", store="s3://b", ref="m:v1", key="refs/m/v1.json", status="NoSuchKey")
    assert (str(e), e.message, e.store, e.ref, e.key, e.status) == (
        "gone",
        "gone",
        "s3://b",
        "m:v1",
        "refs/m/v1.json",
        "NoSuchKey",
    )
    plain = errors.StoreError("down")
    assert (plain.store, plain.ref, plain.key, plain.status) == (None, None, None, None)


def test_builtin_bases_and_exit_codes():
    assert issubclass(errors.UsageError, ValueError) and issubclass(errors.NotFoundError, LookupError)
    assert not issubclass(errors.WaitTimeoutError, OSError)  # the installer maps OSError; a timeout is not one
    assert [
        c.exit_code
        for c in (
            errors.UsageError,
            errors.VerificationError,
            errors.CacheMissError,
            errors.NotFoundError,
            errors.StoreError,
            errors.WaitTimeoutError,
            errors.CompileInStrictModeError,
            errors.DiskFullError,
        )
    ] == list(range(2, 10))


def test_every_category_takes_its_code_and_name_from_the_one_table():
    from cachetool import exit_codes

    codes = {e.code for e in exit_codes.TABLE}
    assert len(codes) == len(exit_codes.TABLE) and len({e.name for e in exit_codes.TABLE}) == len(codes)
    categories = [
        errors.CachetoolError,
        errors.UsageError,
        errors.VerificationError,
        errors.CacheMissError,
        errors.NotFoundError,
        errors.StoreError,
        errors.WaitTimeoutError,
        errors.CompileInStrictModeError,
        errors.DiskFullError,
    ]
    assert {c.exit_code for c in categories} <= codes
    # every class of the module has a code of the table
    for obj in vars(errors).values():
        if isinstance(obj, type) and issubclass(obj, errors.CachetoolError):
            assert obj.exit_code in codes, obj


def test_a_cut_download_retry_is_logged(tmp_path, monkeypatch, caplog):
    from cachetool import bounds
    from cachetool.stores.base import TransferCounters
    from cachetool.stores.common import download_resumable

    monkeypatch.setattr(bounds.time, "sleep", lambda s: None)  # the backoff waits through cachetool.bounds
    data = b"x" * 100
    calls = []

    def open_from(offset):
        calls.append(offset)

        def body():
            yield data[offset : offset + 40]
            if not calls[1:]:
                raise ConnectionError("cut")
            yield data[offset + 40 :]

        return body(), 206 if offset else 200, f"bytes {offset}-99/100" if offset else None

    with caplog.at_level(logging.INFO, logger="cachetool.retry"):
        download_resumable(
            tmp_path / "b",
            100,
            "download blob x",
            open_from,
            (ConnectionError,),
            lambda exc: errors.StoreError(str(exc)),
            TransferCounters(),
            3,
        )
    assert (tmp_path / "b").read_bytes() == data and calls == [0, 40]
    [rec] = [r for r in caplog.records if r.name == "cachetool.retry"]
    assert "download blob x" in rec.getMessage() and "attempt 1 failed" in rec.getMessage()


def test_clip_marks_a_cut_at_a_word_boundary():
    assert errors.clip("short\nline") == "short line"
    long = "Could not deserialize key data. The data may be in an incorrect format, Are you sure this is a key?"
    out = errors.clip(long, 60)
    assert len(out) <= 60 and out.endswith(" …") and long.startswith(out[:-2])
    assert out[:-2].split()[-1] in long.split()  # a whole word, not a cut one


def test_an_os_error_line_without_a_filename_has_one_separator():
    """``pack`` on a full disk said ``pack:: No space left on device``: an OSError with no filename got the colon
    that follows one."""
    import errno

    assert (
        errors.os_error_line(OSError(errno.ENOSPC, "No space left on device"), "pack")
        == "pack: No space left on device"
    )
    assert (
        errors.os_error_line(OSError(errno.ENOSPC, "No space left on device", "/d/b.ctb"), "pack")
        == "pack: /d/b.ctb: No space left on device"
    )
