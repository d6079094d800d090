"""The one way out (`postbox.outbound`): over TLS the connection goes to the checked address while
SNI, the certificate check and the Host header name the URL's host; the request is what a receiver
expects; a URL's shape is checked before anything is looked up."""

from __future__ import annotations

import datetime
import ipaddress
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from postbox import config, outbound
from support import endpoints
from support.endpoints import Endpoint, Network


def _certificate(tmp_path, host: str) -> tuple[str, str]:
    """A self-signed certificate for `host` (its own CA): paths of the certificate and the key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture
def tls_endpoint(tmp_path, monkeypatch):
    """An HTTPS endpoint on loopback whose certificate names hook.example, trusted by outbound."""
    monkeypatch.setenv("POSTBOX_WORK_PUSH_ALLOW_PRIVATE", "1")
    config.reset()
    cert, key = _certificate(tmp_path, "hook.example")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    endpoint = Endpoint(endpoints.status(204), tls=server)
    server.sni_callback = lambda sock, name, ctx: endpoint.sni.append(name)
    trusting = ssl.create_default_context(cafile=cert)
    monkeypatch.setattr(outbound, "_tls", trusting)
    yield endpoint
    endpoint.close()


def test_tls_goes_to_the_checked_address_and_names_the_host(tls_endpoint, monkeypatch):
    net = Network({"hook.example": ["127.0.0.1"]}).install(monkeypatch)
    answer = outbound.post(f"https://hook.example:{tls_endpoint.port}/in?x=1", b'{"a": 1}',
                           {"Content-Type": "application/json"}, 5.0)
    assert answer == outbound.Answer(204, None)
    assert net.connects == ["127.0.0.1"] and tls_endpoint.sni == ["hook.example"]
    [request] = tls_endpoint.got
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /in?x=1 HTTP/1.1" and body == b'{"a": 1}'
    assert f"Host: hook.example:{tls_endpoint.port}" in lines and "Content-Length: 8" in lines


def test_a_certificate_for_another_name_fails_the_call(tls_endpoint, monkeypatch):
    net = Network({"other.example": ["127.0.0.1"]}).install(monkeypatch)
    answer = outbound.post(f"https://other.example:{tls_endpoint.port}/", b"{}", {}, 5.0)
    assert net.connects == ["127.0.0.1"] and answer.status is None
    assert "certificate verify failed" in answer.failure and tls_endpoint.got == []


def test_an_informational_answer_is_skipped_for_the_final_one(monkeypatch):
    monkeypatch.setenv("POSTBOX_WORK_PUSH_ALLOW_PRIVATE", "1")
    config.reset()
    endpoint = Endpoint(endpoints.raw(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 202 Accepted\r\n\r\n"))
    try:
        assert outbound.post(endpoint.url, b"{}", {}, 5.0) == outbound.Answer(202, None)
    finally:
        endpoint.close()


@pytest.mark.parametrize(("url", "says"), [
    ("http://h:abc/", "does not parse"), ("http://h:65536/", "does not parse"), ("http://h:0/", "port"),
    ("file:///etc/passwd", "http or https"), ("http://u:p@h/", "credentials"), ("http:///x", "no host"),
    ("http://h/\r\nX: y", "printable ASCII"), ("http://hé.example/", "printable ASCII"),
])
def test_a_url_is_checked_before_anything_is_looked_up(url, says):
    with pytest.raises(outbound.Refused, match=says):
        outbound.check_url(url)


def test_a_literal_address_is_checked_when_the_url_is():
    assert outbound.check_url("https://93.184.216.34:8443/x").port == 8443
    with pytest.raises(outbound.Refused, match="not a public address"):
        outbound.check_url("http://[::ffff:a9fe:a9fe]/")
    assert outbound.refusal(ipaddress.ip_address("2606:4700:4700::1111")) is None
