from tests.signing_keys import isolated_trust, keys  # noqa: F401 - fixtures of this folder
