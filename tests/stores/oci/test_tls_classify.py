"""``stores.oci.tls.classify_tls_error`` picks the case of a failed TLS connection from the exception types and
fields ``ssl`` exposes, not from message text (it matched ``"certificate verify failed"``, ``"hostname"`` and
``"match"``, ``"wrong version number"``... in ``str(exc)``).

The ``ssl`` errors are real: OpenSSL raises them in a handshake run here between two ``SSLObject``\\ s over memory
BIOs (no sockets), with a private CA made with ``cryptography`` as tests/servers.py makes the TLS registry's. They
are then wrapped the way requests and urllib3 wrap them, under a top-level message that names another case.
tests/stores/oci/test_tls.py checks the same cases' one-line errors against a real TLS registry."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
import requests
import urllib3

from cachetool.stores.oci import tls

LYING = "certificate verify failed: hostname doesn't match; wrong version number; EOF occurred in violation of protocol"


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    """A CA, a certificate for 127.0.0.1 and one for other.example, both signed by it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("certs")
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cachetool test CA")])

    def cert(name: str, key, issuer_key, *, ca: bool, san=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san is not None:
            b = b.add_extension(x509.SubjectAlternativeName([san]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    out = {"ca": d / "ca.crt"}
    out["ca"].write_bytes(cert("cachetool test CA", ca_key, ca_key, ca=True).public_bytes(serialization.Encoding.PEM))
    for name, san in (
        ("ip", x509.IPAddress(ipaddress.ip_address("127.0.0.1"))),
        ("other", x509.DNSName("other.example")),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        pem = cert(name, key, ca_key, ca=False, san=san).public_bytes(serialization.Encoding.PEM)
        (d / f"{name}.crt").write_bytes(pem)
        (d / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        out[name] = d / f"{name}.crt"
    return out


class Client:
    """A TLS client over memory BIOs, for 127.0.0.1, trusting ``ca`` (else only the system's CAs)."""

    def __init__(self, ca: Path | None, *, tls13_only: bool = False):
        ctx = ssl.create_default_context(cafile=str(ca) if ca else None)
        if tls13_only:
            ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")


def _handshake(
    client: Client, server_cert: Path | None = None, *, raw_reply: bytes | None = None, eof: bool = False
) -> ssl.SSLError:
    """Run the client's handshake against a TLS server with ``server_cert``, or against a peer that answers
    ``raw_reply`` (not TLS) or hangs up (``eof``); the ``ssl`` error the client raises."""
    server = s_in = s_out = None
    if server_cert is not None:
        sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        sctx.load_cert_chain(str(server_cert), str(server_cert.with_suffix(".key")))
        s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        server = sctx.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(20):
        try:
            client.obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as exc:
            return exc
        else:
            raise AssertionError("the handshake succeeded")
        hello = client.outgoing.read()
        if server is not None:
            s_in.write(hello)
            try:
                server.do_handshake()
            except ssl.SSLError:
                pass  # wants more (SSLWantReadError), or fails once the client sends its alert
            client.incoming.write(s_out.read())
        elif raw_reply is not None:
            client.incoming.write(raw_reply)
        elif eof:
            client.incoming.write_eof()
    raise AssertionError("no handshake outcome")


def _as_requests_raises(ssl_error: ssl.SSLError, message: str = LYING) -> requests.exceptions.SSLError:
    """``ssl_error`` wrapped as requests/urllib3 wrap it (urllib3 SSLError in MaxRetryError.reason, in requests'
    SSLError), raised from it as urllib3 raises, under a message that names other cases."""
    try:
        try:
            raise urllib3.exceptions.SSLError(ssl_error) from ssl_error
        except urllib3.exceptions.SSLError as u3:
            raise urllib3.exceptions.MaxRetryError(None, "/v2/", reason=u3) from u3
    except urllib3.exceptions.MaxRetryError as retry:
        return requests.exceptions.SSLError(retry, message)


# Each test asserts describe_tls_error first (what client.py calls), then the classification.


def test_an_unknown_ca_is_untrusted(certs):
    err = _handshake(Client(None), certs["ip"])
    assert type(err) is ssl.SSLCertVerificationError
    reason, is_cert = tls.describe_tls_error(_as_requests_raises(err, "wrong version number"))
    assert reason == f"its TLS certificate is not trusted ({err.verify_message})" and is_cert
    failure = tls.classify_tls_error(_as_requests_raises(err))
    assert failure.case == tls.UNTRUSTED and failure.certificate
    assert failure.detail == err.verify_message  # OpenSSL's reason, e.g. "unable to get local issuer certificate"


def test_a_certificate_for_another_host_is_the_wrong_host(certs):
    """The old text match called it untrusted: the IP address mismatch's text is "certificate verify failed"."""
    err = _handshake(Client(certs["ca"]), certs["other"])
    assert type(err) is ssl.SSLCertVerificationError and err.verify_code == 64  # X509_V_ERR_IP_ADDRESS_MISMATCH
    assert tls.describe_tls_error(_as_requests_raises(err, "unable to get local issuer certificate")) == (
        "its TLS certificate is for another host name",
        True,
    )
    failure = tls.classify_tls_error(_as_requests_raises(err))
    assert failure.case == tls.WRONG_HOST and failure.certificate


def test_urllib3s_own_host_name_check_is_the_wrong_host():
    from urllib3.util.ssl_match_hostname import CertificateError

    err = requests.exceptions.SSLError(CertificateError("a message that says nothing"))
    assert tls.describe_tls_error(err) == ("its TLS certificate is for another host name", True)
    assert tls.classify_tls_error(err).case == tls.WRONG_HOST


def test_a_plain_http_answer_is_not_tls(certs):
    err = _handshake(Client(certs["ca"]), raw_reply=b"HTTP/1.1 400 Bad Request\r\n\r\n")
    assert type(err) is ssl.SSLError and err.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")
    assert tls.describe_tls_error(_as_requests_raises(err, "certificate verify failed: self-signed")) == (
        "it does not speak TLS on that port",
        False,
    )
    failure = tls.classify_tls_error(_as_requests_raises(err))
    assert failure.case == tls.NOT_TLS and not failure.certificate


def test_a_hang_up_mid_handshake_is_not_tls(certs):
    err = _handshake(Client(certs["ca"]), eof=True)
    # Python 3.11.7 raises SSLEOFError (UNEXPECTED_EOF_WHILE_READING); 3.11.2 (Debian's) SSLZeroReturnError
    assert isinstance(err, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
    assert tls.describe_tls_error(_as_requests_raises(err, "hostname does not match")) == (
        "it does not speak TLS on that port",
        False,
    )
    assert tls.classify_tls_error(_as_requests_raises(err)).case == tls.NOT_TLS


@pytest.mark.parametrize(
    "err",
    [
        ssl.SSLEOFError(8, "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol (_ssl.c:1006)"),
        ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed (EOF) (_ssl.c:992)"),
    ],
    ids=["eof", "zero-return"],
)
def test_each_kind_of_hang_up_is_not_tls(err):
    """Both ways ``ssl`` reports a peer that closed mid-handshake, whatever Python runs this: 3.11.2 raised
    SSLZeroReturnError (no ``reason``) where 3.11.7 raises SSLEOFError, and it was called a handshake failure."""
    assert tls.describe_tls_error(_as_requests_raises(err, "certificate verify failed")) == (
        "it does not speak TLS on that port",
        False,
    )
    assert tls.classify_tls_error(_as_requests_raises(err)).case == tls.NOT_TLS


def test_another_tls_failure_is_a_handshake_failure_quoting_the_ssl_error(certs):
    err = _handshake(Client(certs["ca"], tls13_only=True), raw_reply=b"\x15\x03\x03\x00\x02\x02\x28")  # an alert
    assert type(err) is ssl.SSLError and err.reason not in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE")
    reason, is_cert = tls.describe_tls_error(_as_requests_raises(err, "certificate verify failed"))
    assert reason.startswith("TLS handshake failed (") and err.reason in reason and not is_cert
    failure = tls.classify_tls_error(_as_requests_raises(err))
    assert failure.case == tls.HANDSHAKE and not failure.certificate


def test_text_alone_says_nothing():
    """The messages the old code matched, with no ``ssl`` error behind them: an unclassified handshake failure."""
    for text in (
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate",
        "hostname '127.0.0.1' doesn't match 'other.example'",
        "[SSL: WRONG_VERSION_NUMBER] wrong version number",
        "EOF occurred in violation of protocol",
    ):
        assert tls.describe_tls_error(requests.exceptions.SSLError(text))[1] is False, text
        assert tls.classify_tls_error(requests.exceptions.SSLError(text)).case == tls.HANDSHAKE, text
