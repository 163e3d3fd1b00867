"""Real S3 and OCI servers for the tests, started on 127.0.0.1 in a temp folder and stopped by pid.

One of each per test run, shared by all the xdist workers (tests/server_run.py: the first worker that needs one
starts it, the others attach; the controller stops them all by pid when the run ends, an interrupted run too).
Each worker has its own part of a shared server: ``make_bucket()`` and ``repo_url()`` names carry the worker's
namespace (``gw0``; ``main`` without xdist), and the tests' own names carry a random part. A shared server cannot
be stopped by a test: a test that stops a server gets one of its own (``rgw.own_gateway()``, ``own_registry``).

Fixtures (session-scoped, started on first use; registered for every test by tests/conftest.py):

- ``rgw`` -> :class:`CephRGW`: Ceph RGW (1 mon + 1 memstore OSD + 1 mgr + radosgw, cephx off, msgr2 crc) with an
  S3 user made by ``radosgw-admin``, so S3 auth *is* enforced. ``rgw.endpoint`` (``http://127.0.0.1:PORT``),
  ``rgw.access_key``, ``rgw.secret_key``, ``rgw.region``, ``rgw.env()`` (the ``AWS_*`` variables for a
  subprocess or ``monkeypatch``), ``rgw.client()`` (a boto3 S3 client), ``rgw.make_bucket(name=None)``,
  ``rgw.own_gateway()`` (a started :class:`RadosGateway` of the caller's own on the same cluster, same user and
  data, on its own port: ``.stop()`` / ``.start()`` it, e.g. to cut a pull; the cluster stays up).
- ``oci_registry`` -> :class:`OCIRegistry`: CNCF distribution (Debian ``docker-registry``) with a small config
  (filesystem root, delete enabled, no auth). ``oci_registry.host`` (``127.0.0.1:PORT``), ``.url``
  (``oci://127.0.0.1:PORT``), ``.repo_url(name)``, ``.data_dir``.
- ``oci_registry_auth`` -> an :class:`OCIRegistry` that requires a login (htpasswd): ``.login`` = (user, password),
  ``.docker_config(folder, user=None, password=None)`` writes a docker ``config.json`` for ``DOCKER_CONFIG``.
- ``oci_mirror`` -> a second plain :class:`OCIRegistry` (the target of ``skopeo copy``); ``oci_registry_tls`` ->
  one serving HTTPS with a certificate from a private CA made here (``.ca_cert``, ``.certs_d(folder)``).
- ``own_registry`` (function scope): a plain :class:`OCIRegistry` of the test's own, to ``.stop()`` and
  ``.start()`` (same port, data kept).
- ``s3_bucket`` (function scope): a fresh bucket name in ``rgw``; ``s3_env`` (function scope): ``rgw.env()``
  applied with monkeypatch, so library calls and ``cachetool`` subprocesses reach RGW.

Outside pytest (the benchmarks) a server is the caller's: ``CephRGW(folder).start_cluster()`` /
``OCIRegistry(folder).start()``, then ``.stop_all()``.

The binaries come from Debian: ``apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-mgr
docker-registry skopeo``. Missing binaries skip the tests locally, and fail them under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.server_run import server_run

CEPH_BINARIES = ("ceph-mon", "ceph-osd", "ceph-mgr", "radosgw", "radosgw-admin", "ceph", "monmaptool", "ceph-authtool")
REGISTRY_BINARY = "docker-registry"
APT_HINT = "apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-mgr docker-registry skopeo"

Record = Callable[[int], None]  # told the pid of each server process as it is spawned (tests/server_run.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _missing_or_fail(what: str, missing: list[str]) -> None:
    msg = f"{what} needs {', '.join(missing)} on PATH; install with: {APT_HINT}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return "(no log)"
    return "\n".join(lines)


def _http_up(url: str, timeout: float = 1.0) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=timeout).read()
        return True
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False


def _wait_until_up(up: Callable[[], bool], procs: list, what: str, timeout: float) -> None:
    """Poll ``up()`` until it is true; fail with the log's tail when one of ``procs`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not up():
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited while starting {what}:\n{_tail(p.log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {timeout:.0f} s:\n{_tail(procs[-1].log)}")
        time.sleep(0.1)


class _Proc:
    """A server process in the foreground of a Popen (so its pid is ours), logs to a file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None, record: Record | None = None):
        self.name, self.argv, self.log = name, argv, log
        self.env = env
        self.record = record
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        f = open(self.log, "ab")
        self.popen = subprocess.Popen(
            self.argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        f.close()
        if self.record:
            self.record(self.popen.pid)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
            except ProcessLookupError:
                pass
        self.popen = None


# ---------------------------------------------------------------------------------------------------- Ceph RGW
class _S3Access:
    """The S3 user every gateway of the cluster serves, and how a client reaches ``self.endpoint`` with it."""

    access_key = "CACHETOOLTESTKEY0001"
    secret_key = "cachetool-test-secret-0123456789abcdef"
    region = "us-east-1"
    endpoint: str

    def env(self, access_key: str | None = None, secret_key: str | None = None) -> dict:
        return {
            "AWS_ACCESS_KEY_ID": access_key or self.access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key or self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self, **kw):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
            **kw,
        )


class RadosGateway(_S3Access):
    """One radosgw daemon of a cluster (``ceph.conf``), named ``client.<name>``, on its own port."""

    def __init__(self, conf: Path, name: str, port: int | None = None, record: Record | None = None):
        self.conf, self.name, self.record = conf, name, record
        self.port = port or free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = conf.parent / "log" / f"{name}.out"
        self.proc: _Proc | None = None

    def start(self, ready_timeout: float = 60, cluster: dict[str, _Proc] | None = None) -> None:
        if self.proc is not None and self.proc.alive():
            return
        (self.conf.parent / "rgw" / self.name).mkdir(parents=True, exist_ok=True)
        self.proc = _Proc(
            self.name,
            [
                "radosgw",
                "-f",
                "-c",
                str(self.conf),
                "-n",
                f"client.{self.name}",
                "--rgw-frontends",
                f"beast endpoint=127.0.0.1:{self.port}",
                "--rgw-data",
                str(self.conf.parent / "rgw" / self.name),
                "--rgw-dns-name",
                "127.0.0.1",
            ],
            self.log,
            record=self.record,
        )
        self.proc.start()
        _wait_until_up(
            lambda: _http_up(self.endpoint + "/"),
            [*(cluster or {}).values(), self.proc],
            f"RGW on {self.endpoint}",
            ready_timeout,
        )

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


class CephRGW(_S3Access):
    """A Ceph cluster (mon, memstore OSD, mgr) with its gateway ``client.rgw``. Started here by
    :meth:`start_cluster` (the caller's: :meth:`stop_all`), or attached to a run's shared one (:meth:`attach`)."""

    def __init__(self, base: Path, record: Record | None = None):
        self.dir = base
        self.conf = base / "ceph.conf"
        self.record = record
        self.mon_port = free_port()
        self.mon_port1 = free_port()
        self.gateway = RadosGateway(self.conf, "rgw", record=record)
        self.port, self.endpoint = self.gateway.port, self.gateway.endpoint
        self.procs: dict[str, _Proc] = {}
        self.namespace = ""  # a worker's part of a shared cluster: in the names make_bucket() makes
        self.shared = False
        self._buckets = 0

    # --- a run's shared cluster
    def state(self) -> dict:
        return {"dir": str(self.dir), "mon_port": self.mon_port, "mon_port1": self.mon_port1, "port": self.port}

    @classmethod
    def attach(cls, state: dict, namespace: str) -> CephRGW:
        """A handle on a running shared cluster: it makes buckets in ``namespace`` and cannot stop anything."""
        rgw = cls(Path(state["dir"]))
        rgw.mon_port, rgw.mon_port1 = state["mon_port"], state["mon_port1"]
        rgw.gateway = RadosGateway(rgw.conf, "rgw", port=state["port"])
        rgw.port, rgw.endpoint = rgw.gateway.port, rgw.gateway.endpoint
        rgw.namespace, rgw.shared = namespace, True
        return rgw

    def own_gateway(self, record: Record | None = None) -> RadosGateway:
        """A started gateway of the caller's own on this cluster (same user, same buckets): stop and start it
        without cutting anyone else off."""
        gateway = RadosGateway(self.conf, f"rgw.own-{uuid.uuid4().hex[:8]}", record=record)
        gateway.start()
        return gateway

    # --- setup
    def _write_conf(self) -> None:
        d = self.dir
        fsid = uuid.uuid4()
        mon = f"[v2:127.0.0.1:{self.mon_port},v1:127.0.0.1:{self.mon_port1}]"
        self.conf.write_text(f"""[global]
fsid = {fsid}
mon host = {mon}
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
ms client mode = crc
ms service mode = crc
ms cluster mode = crc
run dir = {d}/run
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg autoscale mode = off
osd objectstore = memstore
memstore device bytes = {8 << 30}
osd data = {d}/osd
mon data = {d}/mon
mgr data = {d}/mgr
keyring = {d}/keyring
""")
        self._fsid = str(fsid)
        self._mon_addr = mon

    def _run(self, *argv: str, timeout: float = 60) -> str:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
        return p.stdout

    def _daemon(self, name: str, *argv: str) -> None:
        p = _Proc(name, [*argv, "-f", "-c", str(self.conf)], self.dir / "log" / f"{name}.out", record=self.record)
        p.start()
        self.procs[name] = p

    def start_cluster(self, ready_timeout: float = 120) -> None:
        d = self.dir
        for sub in ("mon", "osd", "mgr", "run", "log", "rgw"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self._write_conf()
        c = str(self.conf)
        self._run(
            "ceph-authtool",
            "--create-keyring",
            str(d / "keyring"),
            "--gen-key",
            "-n",
            "mon.",
            "--cap",
            "mon",
            "allow *",
        )
        self._run("monmaptool", "--create", "--addv", "a", self._mon_addr, "--fsid", self._fsid, str(d / "monmap"))
        self._run("ceph-mon", "-c", c, "--mkfs", "-i", "a", "--monmap", str(d / "monmap"))
        self._daemon("mon", "ceph-mon", "-i", "a")
        osd_uuid = str(uuid.uuid4())
        self._retry(
            lambda: self._run("ceph", "-c", c, "--connect-timeout", "10", "osd", "new", osd_uuid, timeout=30),
            "ceph osd new",
            40,
        )
        self._run("ceph-osd", "-c", c, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._daemon("osd", "ceph-osd", "-i", "0")
        self._daemon("mgr", "ceph-mgr", "-i", "x")
        self.start(ready_timeout)
        self._retry(
            lambda: self._run(
                "radosgw-admin",
                "-c",
                c,
                "user",
                "create",
                "--uid",
                "cachetool-test",
                "--display-name",
                "cachetool tests",
                "--access-key",
                self.access_key,
                "--secret",
                self.secret_key,
                timeout=60,
            ),
            "radosgw-admin user create",
            60,
        )

    def _retry(self, fn, what: str, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn()
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not succeed within {timeout:.0f} s: {exc}\n{self.logs()}") from None
                time.sleep(0.5)

    def logs(self) -> str:
        out = []
        for name, p in [*self.procs.items(), ("rgw", self.gateway.proc)]:
            if p is not None:
                state = "alive" if p.alive() else f"exited {p.popen.returncode if p.popen else '-'}"
                out.append(f"--- {name} ({state}) {p.log}\n{_tail(p.log, 8)}")
        return "\n".join(out)

    # --- the gateway only (the cluster and its data stay up)
    def start(self, ready_timeout: float = 60) -> None:
        self._refuse_if_shared("start")
        self.gateway.start(ready_timeout, cluster=self.procs)

    def stop(self) -> None:
        self._refuse_if_shared("stop")
        self.gateway.stop()

    def stop_all(self) -> None:
        self._refuse_if_shared("stop")
        self.gateway.stop()
        for name in ("mgr", "osd", "mon"):
            if name in self.procs:
                self.procs[name].stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _refuse_if_shared(self, what: str) -> None:
        if self.shared:
            raise RuntimeError(
                f"cannot {what} the run's shared RGW (every worker uses it): a test that stops a "
                "server takes a gateway of its own (rgw.own_gateway())"
            )

    # --- helpers for tests
    def make_bucket(self, name: str | None = None) -> str:
        """A bucket in this worker's namespace: ``NAME-NAMESPACE``, or a fresh name."""
        self._buckets += 1
        if name is None:
            name = "-".join(part for part in ("ct", self.namespace, str(self._buckets), uuid.uuid4().hex[:8]) if part)
        elif self.namespace:
            name = f"{name}-{self.namespace}"
        c = self.client()
        deadline = time.monotonic() + 60
        while True:  # the first bucket makes the lazy pools; give it time
            try:
                c.create_bucket(Bucket=name)
                return name
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


# ---------------------------------------------------------------------------------------------------- registry
class OCIRegistry:
    """A docker-registry started here by :meth:`start` (the caller's: :meth:`stop_all`), or attached to a run's
    shared one (:meth:`attach`)."""

    def __init__(
        self, base: Path, login: tuple[str, str] | None = None, tls: bool = False, record: Record | None = None
    ):
        self.login = login  # (user, password): htpasswd (Basic) auth enforced
        self.tls = tls  # serve HTTPS with a certificate from a private CA (``.ca_cert``)
        self.ca_cert: Path | None = None
        self.dir = base
        self.data_dir = base / "data"
        self.record = record
        self._listen(free_port())
        self.proc: _Proc | None = None
        self.namespace = ""  # a worker's part of a shared registry: the first folder of repo_url()'s names
        self.shared = False
        self._repos = 0

    def _listen(self, port: int) -> None:
        self.port = port
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"oci://{self.host}"

    def state(self) -> dict:
        return {
            "dir": str(self.dir),
            "port": self.port,
            "login": self.login,
            "tls": self.tls,
            "ca_cert": str(self.ca_cert) if self.ca_cert else None,
        }

    @classmethod
    def attach(cls, state: dict, namespace: str) -> OCIRegistry:
        """A handle on a running shared registry: its repo_url() names are in ``namespace``; it cannot stop it."""
        reg = cls(Path(state["dir"]), login=tuple(state["login"]) if state["login"] else None, tls=state["tls"])
        reg._listen(state["port"])
        reg.ca_cert = Path(state["ca_cert"]) if state["ca_cert"] else None
        reg.namespace, reg.shared = namespace, True
        return reg

    def repo_url(self, name: str | None = None) -> str:
        self._repos += 1
        ns = f"{self.namespace}/" if self.namespace else ""
        return f"{self.url}/{ns}{name or f'ct/repo{self._repos}-{uuid.uuid4().hex[:6]}'}"

    def _config(self) -> Path:
        cfg = self.dir / "config.yml"
        cfg.write_text(
            f"""version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {self.data_dir}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {self.host}
  secret: cachetool-tests-only
"""
            + (
                f"""  tls:
    certificate: {self.dir / "server.crt"}
    key: {self.dir / "server.key"}
"""
                if self.tls
                else ""
            )
            + (
                f"""auth:
  htpasswd:
    realm: cachetool-tests
    path: {self._htpasswd()}
"""
                if self.login
                else ""
            )
        )
        return cfg

    def _htpasswd(self) -> Path:
        user, pw = self.login
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt

            h = crypt.crypt(pw, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))  # cost 4: it is checked per request
        except (ImportError, AttributeError):
            import bcrypt  # Python >= 3.13 has no crypt module

            h = bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4)).decode()
        p = self.dir / "htpasswd"
        p.write_text(f"{user}:{h}\n")
        return p

    def docker_config(self, folder: Path, user: str | None = None, password: str | None = None) -> Path:
        """Write ``folder/config.json`` with a login for this registry (set DOCKER_CONFIG=folder to use it)."""
        import base64
        import json

        u, p = self.login or ("", "")
        tok = base64.b64encode(f"{user or u}:{password or p}".encode()).decode()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps({"auths": {self.host: {"auth": tok}}}))
        return folder

    def _make_certs(self) -> None:
        """A private CA and a server certificate for 127.0.0.1, made with ``cryptography``."""
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.UTC)

        def cert(subject, issuer, pub, key, *, ca: bool):
            b = (
                x509.CertificateBuilder()
                .subject_name(subject)
                .issuer_name(issuer)
                .public_key(pub)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=2))
                .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            )
            if not ca:
                b = b.add_extension(
                    x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
                )
            return b.sign(key, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cachetool test CA")])
        ca = cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
        key = ec.generate_private_key(ec.SECP256R1())
        srv = cert(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
            ca_name,
            key.public_key(),
            ca_key,
            ca=False,
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_cert = self.dir / "ca.crt"
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        (self.dir / "server.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
        (self.dir / "server.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )

    def certs_d(self, folder: Path) -> Path:
        """A certs.d folder with this registry's CA (``CACHETOOL_CERTS_D=folder``)."""
        d = folder / self.host
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.ca_cert, d / "ca.crt")
        return folder

    def _up(self) -> bool:
        if not self.tls:
            return _http_up(f"http://{self.host}/v2/")
        import requests

        try:
            return requests.get(f"https://{self.host}/v2/", timeout=1.0, verify=str(self.ca_cert)).status_code < 500
        except requests.RequestException:
            return False

    def start(self, ready_timeout: float = 30) -> None:
        self._refuse_if_shared("start")
        if self.proc is not None and self.proc.alive():
            return
        if self.tls and self.ca_cert is None:
            self._make_certs()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = _Proc(
            "registry",
            [REGISTRY_BINARY, "serve", str(self._config())],
            self.dir / "registry.log",
            env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
            record=self.record,
        )
        self.proc.start()
        _wait_until_up(self._up, [self.proc], f"docker-registry on {self.host}", ready_timeout)

    def stop(self) -> None:
        self._refuse_if_shared("stop")
        if self.proc is not None:
            self.proc.stop()

    def stop_all(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _refuse_if_shared(self, what: str) -> None:
        if self.shared:
            raise RuntimeError(
                f"cannot {what} the run's shared registry (every worker uses it): a test that stops "
                "a server takes one of its own (the own_registry fixture)"
            )


# ---------------------------------------------------------------------------------------------------- fixtures
def require_binaries(what: str, binaries) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        _missing_or_fail(what, missing)


def _start_rgw(folder: Path, record: Record) -> CephRGW:
    server = CephRGW(folder, record=record)
    server.start_cluster()
    server.make_bucket("ct-warmup")  # create the lazy pools once, here
    return server


@pytest.fixture(scope="session")
def rgw(request) -> CephRGW:
    require_binaries("the S3 tests (Ceph RGW)", CEPH_BINARIES)
    return server_run(request.config).shared("rgw", CephRGW, _start_rgw)


def _registry(request, name: str, **options) -> OCIRegistry:
    """The run's docker-registry ``name`` on 127.0.0.1 (started by the first worker that asks)."""
    require_binaries("the OCI tests (docker-registry)", [REGISTRY_BINARY])

    def start(folder: Path, record: Record) -> OCIRegistry:
        server = OCIRegistry(folder, record=record, **options)
        server.start()
        return server

    return server_run(request.config).shared(name, OCIRegistry, start)


@pytest.fixture(scope="session")
def oci_registry(request) -> OCIRegistry:
    return _registry(request, "oci")


@pytest.fixture(scope="session")
def oci_registry_auth(request) -> OCIRegistry:
    """A second docker-registry that requires a login (htpasswd, Basic auth): ``.login`` = (user, password);
    ``.docker_config(folder)`` writes a docker config.json with it."""
    return _registry(request, "oci-auth", login=("cachetool", "registry-pass-1"))


@pytest.fixture(scope="session")
def oci_mirror(request) -> OCIRegistry:
    """A second plain docker-registry: the target of ``skopeo copy`` (mirrors, the air-gap hop)."""
    return _registry(request, "oci-mirror")


@pytest.fixture(scope="session")
def oci_registry_tls(request) -> OCIRegistry:
    """A docker-registry serving HTTPS with a certificate from a private CA: ``.ca_cert``, ``.certs_d(folder)``."""
    return _registry(request, "oci-tls", tls=True)


@pytest.fixture
def own_registry(request, tmp_path) -> OCIRegistry:
    """A plain docker-registry of this test's own (to stop and start), stopped at the test's end."""
    require_binaries("the OCI tests (docker-registry)", [REGISTRY_BINARY])
    server = OCIRegistry(tmp_path / "own-registry", record=server_run(request.config).recorder("own-registry"))
    server.start()
    yield server
    server.stop_all()


@pytest.fixture
def s3_bucket(rgw) -> str:
    return rgw.make_bucket()


@pytest.fixture
def s3_env(rgw, monkeypatch) -> dict:
    env = rgw.env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return env
