"""The OCI Bearer token flow (WWW-Authenticate → token service with the docker config.json login → retry),
against a small in-process stand-in for a token-auth registry; and plain HTTP only for localhost."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from cachetool.errors import NotFoundError, StoreError
from cachetool.stores.oci import OCIStore, registry_credentials


class _Handler(BaseHTTPRequestHandler):
    user, password, token = "alice", "pw-1", "tok-123"
    seen: list = []

    def log_message(self, *a):
        pass

    def _send(self, code, doc, headers=None):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urlparse(self.path)
        port = self.server.server_address[1]
        if u.path == "/token":
            q = parse_qs(u.query)
            self.seen.append(("token", q.get("service"), q.get("scope")))
            good = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            if self.headers.get("Authorization") != good:
                return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]})
            return self._send(200, {"token": self.token})
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            challenge = (
                f'Bearer realm="http://127.0.0.1:{port}/token",service="fake-registry",'
                f'scope="repository:team/llama:pull"'
            )
            return self._send(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {"WWW-Authenticate": challenge})
        self.seen.append(("api", u.path))
        if u.path.endswith("/tags/list"):
            return self._send(200, {"name": "team/llama", "tags": []})
        return self._send(404, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]})


@pytest.fixture
def token_registry():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Handler.seen = []
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _login(tmp_path, monkeypatch, host, user, pw):
    d = tmp_path / "docker"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(
        json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{pw}".encode()).decode()}}})
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(d))


def test_bearer_token_flow(token_registry, tmp_path, monkeypatch):
    _login(tmp_path, monkeypatch, token_registry, "alice", "pw-1")
    st = OCIStore(token_registry, "team/llama")
    with pytest.raises(NotFoundError, match="no such tag"):
        st.get_ref("llama", "v1")  # authenticated: the registry says the tag is unknown
    assert ("token", ["fake-registry"], ["repository:team/llama:pull"]) in _Handler.seen
    assert ("api", "/v2/team/llama/manifests/v1") in _Handler.seen


def test_bearer_token_wrong_password(token_registry, tmp_path, monkeypatch):
    _login(tmp_path, monkeypatch, token_registry, "alice", "nope")
    with pytest.raises(StoreError, match="refused the credentials") as ei:
        OCIStore(token_registry, "team/llama").get_ref("llama", "v1")
    assert "\n" not in str(ei.value)


def test_credentials_from_docker_config_variants(tmp_path, monkeypatch):
    d = tmp_path / "docker"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://reg.example": {"auth": base64.b64encode(b"u1:p:1").decode()},
                    "other.example:5000": {"username": "u2", "password": "p2"},
                }
            }
        )
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(d))
    assert registry_credentials("reg.example") == ("u1", "p:1")
    assert registry_credentials("other.example:5000") == ("u2", "p2")
    assert registry_credentials("unknown.example") is None


def test_plain_http_only_for_localhost():
    assert OCIStore("127.0.0.1:5000", "x").client.base == "http://127.0.0.1:5000"
    assert OCIStore("localhost", "x").client.base == "http://localhost"
    assert OCIStore("registry.example", "x").client.base == "https://registry.example"
    # --insecure is what its help says (unverified TLS); plain HTTP is its own switch
    st = OCIStore("registry.example:5000", "x", insecure=True)
    assert st.client.base == "https://registry.example:5000" and st.client.tls.verify is False
    assert OCIStore("registry.example:5000", "x", plain_http=True).client.base == "http://registry.example:5000"


# ------------------------------------------------------------------------------------------- the containers tools
@pytest.fixture
def no_logins(tmp_path, monkeypatch):
    """No credential file of this machine leaks in: every place :mod:`auth` looks is under tmp_path."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    return tmp_path


def _skopeo_login(reg, authfile, password=None):
    import shutil
    import subprocess

    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed")
    user, pw = reg.login
    p = subprocess.run(
        [
            "skopeo",
            "login",
            "--tls-verify=false",
            "--authfile",
            str(authfile),
            "-u",
            user,
            "--password-stdin",
            reg.host,
        ],
        input=password or pw,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert reg.host in json.loads(authfile.read_text())["auths"]


def test_a_login_written_by_skopeo_login_works(oci_registry_auth, bundle, keys, cli, no_logins, monkeypatch):
    # Before: only the docker config.json was read; REGISTRY_AUTH_FILE and containers' auth.json were ignored.
    from cachetool.bundle.ctb import write_ctb

    reg, tmp = oci_registry_auth, no_logins
    ctb = write_ctb(bundle, tmp / "b.ctb")
    ref = f"{reg.url}/team/skopeo-login:v1"
    authfile = tmp / "elsewhere" / "auth.json"
    authfile.parent.mkdir()
    _skopeo_login(reg, authfile)
    r = cli("push", ctb, ref)
    assert r.rc == 6 and "wants a login" in r.error_line(), r
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(authfile))
    r = cli("push", ctb, ref)
    assert r.rc == 0, r
    # skopeo login's default place: $XDG_RUNTIME_DIR/containers/auth.json
    monkeypatch.delenv("REGISTRY_AUTH_FILE")
    default = tmp / "run" / "containers" / "auth.json"
    default.parent.mkdir(parents=True)
    _skopeo_login(reg, default)
    r = cli("pull", ref, "--cache-root", tmp / "root", "--trust", keys["pub"])
    assert r.rc == 0, r


def test_auth_json_keys_per_namespace(no_logins, monkeypatch):
    from cachetool.stores.oci import registry_credentials

    f = no_logins / "auth.json"
    tok = lambda u: base64.b64encode(f"{u}:pw".encode()).decode()  # noqa: E731
    f.write_text(
        json.dumps(
            {
                "auths": {
                    "reg.example": {"auth": tok("host")},
                    "reg.example/team": {"auth": tok("team")},
                    "reg.example/team/llama": {"auth": tok("repo")},
                }
            }
        )
    )
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(f))
    assert registry_credentials("reg.example", "team/llama")[0] == "repo"
    assert registry_credentials("reg.example", "team/other")[0] == "team"
    assert registry_credentials("reg.example", "solo")[0] == "host"
