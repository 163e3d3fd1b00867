"""Shared test setup. The real S3 (Ceph RGW) and OCI (docker-registry) servers live in tests/servers.py as
session-scoped fixtures: started on 127.0.0.1 on first use, stopped by pid at the end of the session."""

pytest_plugins = ["tests.servers"]
