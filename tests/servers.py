"""Real S3 and OCI servers for the tests, started on 127.0.0.1 in a temp folder and stopped by pid.

Fixtures (session-scoped, started on first use; registered for every test by tests/conftest.py):

- ``rgw`` -> :class:`CephRGW`: Ceph RGW (1 mon + 1 memstore OSD + 1 mgr + radosgw, cephx off, msgr2 crc) with an
  S3 user made by ``radosgw-admin``, so S3 auth *is* enforced. ``rgw.endpoint`` (``http://127.0.0.1:PORT``),
  ``rgw.access_key``, ``rgw.secret_key``, ``rgw.region``, ``rgw.env()`` (the ``AWS_*`` variables for a
  subprocess or ``monkeypatch``), ``rgw.client()`` (a boto3 S3 client), ``rgw.make_bucket(name=None)``,
  ``rgw.stop()`` / ``rgw.start()`` (radosgw only; the cluster and its data stay up).
- ``oci_registry`` -> :class:`OCIRegistry`: CNCF distribution (Debian ``docker-registry``) with a small config
  (filesystem root, delete enabled, no auth). ``oci_registry.host`` (``127.0.0.1:PORT``), ``.url``
  (``oci://127.0.0.1:PORT``), ``.repo_url(name)``, ``.data_dir``, ``.stop()`` / ``.start()`` (same port, data kept).
- ``oci_registry_auth`` -> an :class:`OCIRegistry` that requires a login (htpasswd): ``.login`` = (user, password),
  ``.docker_config(folder, user=None, password=None)`` writes a docker ``config.json`` for ``DOCKER_CONFIG``.
- ``oci_mirror`` -> a second plain :class:`OCIRegistry` (the target of ``skopeo copy``); ``oci_registry_tls`` ->
  one serving HTTPS with a certificate from a private CA made here (``.ca_cert``, ``.certs_d(folder)``).
- ``s3_bucket`` (function scope): a fresh bucket name in ``rgw``; ``s3_env`` (function scope): ``rgw.env()``
  applied with monkeypatch, so library calls and ``cachetool`` subprocesses reach RGW.

The binaries come from Debian: ``apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-mgr
docker-registry skopeo``. Missing binaries skip the tests locally, and fail them under ``CI=true``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

CEPH_BINARIES = ("ceph-mon", "ceph-osd", "ceph-mgr", "radosgw", "radosgw-admin", "ceph", "monmaptool", "ceph-authtool")
REGISTRY_BINARY = "docker-registry"
APT_HINT = "apt-get install -y --no-install-recommends radosgw ceph-mon ceph-osd ceph-mgr docker-registry skopeo"

_live: list = []  # servers to stop at interpreter exit if the session is torn down abnormally


def _stop_all_at_exit() -> None:
    for s in list(_live):
        try:
            s.stop_all()
        except Exception:
            pass


atexit.register(_stop_all_at_exit)


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


class _Proc:
    """A server process in the foreground of a Popen (so its pid is ours), logs to a file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name, self.argv, self.log = name, argv, log
        self.env = env
        self.popen: subprocess.Popen | None = None

    def start(self) -> None:
        f = open(self.log, "ab")
        self.popen = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=self.env, start_new_session=True)
        f.close()

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
class CephRGW:
    access_key = "CACHETOOLTESTKEY0001"
    secret_key = "cachetool-test-secret-0123456789abcdef"
    region = "us-east-1"

    def __init__(self, base: Path):
        self.dir = base
        self.conf = base / "ceph.conf"
        self.mon_port = free_port()
        self.mon_port1 = free_port()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, _Proc] = {}
        self._buckets = 0

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
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{self.port}
rgw data = {d}/rgw
rgw dns name = 127.0.0.1
""")
        self._fsid = str(fsid)
        self._mon_addr = mon

    def _run(self, *argv: str, timeout: float = 60) -> str:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
        return p.stdout

    def _daemon(self, name: str, *argv: str) -> None:
        p = _Proc(name, [*argv, "-f", "-c", str(self.conf)], self.dir / "log" / f"{name}.out")
        p.start()
        self.procs[name] = p

    def start_cluster(self, ready_timeout: float = 120) -> None:
        d = self.dir
        for sub in ("mon", "osd", "mgr", "run", "log", "rgw"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self._write_conf()
        c = str(self.conf)
        self._run("ceph-authtool", "--create-keyring", str(d / "keyring"), "--gen-key", "-n", "mon.",
                  "--cap", "mon", "allow *")
        self._run("monmaptool", "--create", "--addv", "a", self._mon_addr, "--fsid", self._fsid, str(d / "monmap"))
        self._run("ceph-mon", "-c", c, "--mkfs", "-i", "a", "--monmap", str(d / "monmap"))
        self._daemon("mon", "ceph-mon", "-i", "a")
        osd_uuid = str(uuid.uuid4())
        self._retry(lambda: self._run("ceph", "-c", c, "--connect-timeout", "10", "osd", "new", osd_uuid, timeout=30),
                    "ceph osd new", 40)
        self._run("ceph-osd", "-c", c, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid)
        self._daemon("osd", "ceph-osd", "-i", "0")
        self._daemon("mgr", "ceph-mgr", "-i", "x")
        self.start(ready_timeout)
        self._retry(lambda: self._run(
            "radosgw-admin", "-c", c, "user", "create", "--uid", "cachetool-test", "--display-name", "cachetool tests",
            "--access-key", self.access_key, "--secret", self.secret_key, timeout=60), "radosgw-admin user create", 60)

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
        for name in ("mon", "osd", "mgr", "rgw"):
            if name in self.procs:
                p = self.procs[name]
                state = "alive" if p.alive() else f"exited {p.popen.returncode if p.popen else '-'}"
                out.append(f"--- {name} ({state}) {p.log}\n{_tail(p.log, 8)}")
        return "\n".join(out)

    # --- radosgw only (the "server stopped mid-pull" tests)
    def start(self, ready_timeout: float = 60) -> None:
        if "rgw" in self.procs and self.procs["rgw"].alive():
            return
        self._daemon("rgw", "radosgw", "-n", "client.rgw")
        deadline = time.monotonic() + ready_timeout
        while not _http_up(self.endpoint + "/"):
            for name, p in self.procs.items():
                if not p.alive():
                    raise RuntimeError(f"ceph {name} exited while starting RGW\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"RGW did not answer on {self.endpoint} within {ready_timeout:.0f} s\n{self.logs()}")
            time.sleep(0.25)

    def stop(self) -> None:
        if "rgw" in self.procs:
            self.procs["rgw"].stop()

    def stop_all(self) -> None:
        for name in ("rgw", "mgr", "osd", "mon"):
            if name in self.procs:
                self.procs[name].stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers for tests
    def env(self, access_key: str | None = None, secret_key: str | None = None) -> dict:
        return {"AWS_ACCESS_KEY_ID": access_key or self.access_key,
                "AWS_SECRET_ACCESS_KEY": secret_key or self.secret_key,
                "AWS_DEFAULT_REGION": self.region, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self, **kw):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region,
                            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required"), **kw)

    def make_bucket(self, name: str | None = None) -> str:
        self._buckets += 1
        name = name or f"ct-{self._buckets}-{uuid.uuid4().hex[:8]}"
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
    def __init__(self, base: Path, login: tuple[str, str] | None = None, tls: bool = False):
        self.login = login  # (user, password): htpasswd (Basic) auth enforced
        self.tls = tls  # serve HTTPS with a certificate from a private CA (``.ca_cert``)
        self.ca_cert: Path | None = None
        self.dir = base
        self.data_dir = base / "data"
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"oci://{self.host}"
        self.proc: _Proc | None = None
        self._repos = 0

    def repo_url(self, name: str | None = None) -> str:
        self._repos += 1
        return f"{self.url}/{name or f'ct/repo{self._repos}-{uuid.uuid4().hex[:6]}'}"

    def _config(self) -> Path:
        cfg = self.dir / "config.yml"
        cfg.write_text(f"""version: 0.1
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
""" + (f"""  tls:
    certificate: {self.dir / 'server.crt'}
    key: {self.dir / 'server.key'}
""" if self.tls else "") + (f"""auth:
  htpasswd:
    realm: cachetool-tests
    path: {self._htpasswd()}
""" if self.login else ""))
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

        u, p = (self.login or ("", ""))
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

        now = datetime.datetime.now(datetime.timezone.utc)

        def cert(subject, issuer, pub, key, *, ca: bool):
            b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(pub)
                 .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                 .not_valid_after(now + datetime.timedelta(days=2))
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
            if not ca:
                b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                    critical=False)
            return b.sign(key, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cachetool test CA")])
        ca = cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
        key = ec.generate_private_key(ec.SECP256R1())
        srv = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, key.public_key(),
                   ca_key, ca=False)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_cert = self.dir / "ca.crt"
        self.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        (self.dir / "server.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
        (self.dir / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                                serialization.PrivateFormat.PKCS8,
                                                                serialization.NoEncryption()))

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
        if self.proc is not None and self.proc.alive():
            return
        if self.tls and self.ca_cert is None:
            self._make_certs()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = _Proc("registry", [REGISTRY_BINARY, "serve", str(self._config())], self.dir / "registry.log",
                          env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
        self.proc.start()
        deadline = time.monotonic() + ready_timeout
        while not self._up():
            if not self.proc.alive():
                raise RuntimeError(f"docker-registry exited:\n{_tail(self.proc.log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"docker-registry did not answer on {self.host} within {ready_timeout:.0f} s:\n"
                                   f"{_tail(self.proc.log)}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def stop_all(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- fixtures
def _serve(server, start):
    """Run ``start()``, yield the server for the session, and stop it by pid however the session ends."""
    _live.append(server)
    try:
        start()
    except BaseException:
        server.stop_all()
        _live.remove(server)
        raise
    yield server
    server.stop_all()
    _live.remove(server)


def _require(what: str, binaries) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        _missing_or_fail(what, missing)


@pytest.fixture(scope="session")
def rgw():
    _require("the S3 tests (Ceph RGW)", CEPH_BINARIES)
    server = CephRGW(Path(tempfile.mkdtemp(prefix="ct-rgw-")))

    def start():
        server.start_cluster()
        server.make_bucket("ct-warmup")  # create the lazy pools once, here

    yield from _serve(server, start)


def _registry(prefix: str, **options):
    """A session's docker-registry on 127.0.0.1 (started, yielded, stopped by pid)."""
    _require("the OCI tests (docker-registry)", [REGISTRY_BINARY])
    server = OCIRegistry(Path(tempfile.mkdtemp(prefix=prefix)), **options)
    yield from _serve(server, server.start)


@pytest.fixture(scope="session")
def oci_registry():
    yield from _registry("ct-oci-")


@pytest.fixture(scope="session")
def oci_registry_auth():
    """A second docker-registry that requires a login (htpasswd, Basic auth): ``.login`` = (user, password);
    ``.docker_config(folder)`` writes a docker config.json with it."""
    yield from _registry("ct-ociauth-", login=("cachetool", "registry-pass-1"))


@pytest.fixture(scope="session")
def oci_mirror():
    """A second plain docker-registry: the target of ``skopeo copy`` (mirrors, the air-gap hop)."""
    yield from _registry("ct-ocimirror-")


@pytest.fixture(scope="session")
def oci_registry_tls():
    """A docker-registry serving HTTPS with a certificate from a private CA: ``.ca_cert``, ``.certs_d(folder)``."""
    yield from _registry("ct-ocitls-", tls=True)


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
