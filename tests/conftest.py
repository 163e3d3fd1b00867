"""Shared test setup. The real S3 (Ceph RGW) and OCI (docker-registry) servers live in tests/servers.py as
session-scoped fixtures: started on 127.0.0.1 on first use, stopped by pid at the end of the session."""

import importlib.util

# tests/servers.py is registered as a plugin so every test folder can use the server fixtures.
pytest_plugins = ["tests.servers"] if importlib.util.find_spec("tests.servers") else []
