"""Reach an agent whatever model endpoint it hard-codes: HTTPS interception for the drift probe's own run.

``prepare(...)`` builds, for one sandboxed run, everything grader/sandbox.py needs to send the hosts of
``grader/rules/intercept.toml`` to the kit's stand-in:

- a hosts file shown over ``/etc/hosts`` inside that run only (each intercepted name -> 127.0.0.1);
- a CA made for this run (ECDSA P-256, valid one day) and a leaf certificate for every intercepted name,
  signed by it; the CA certificate is what the run trusts, through ``SSL_CERT_FILE``,
  ``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE`` and, for clients that ignore those (httpx with
  ``trust_env=False``, a hard-coded ``certifi.where()``), shown over the venv's certifi bundles and the
  system bundle; nothing off the machine is reachable from that run, so trusting only this CA costs nothing;
- the command of the grader-owned TLS end (grader/_intercept_helper.py), run by the sandbox as the grader's
  user in the run's network namespace, before the run, outside its mount namespace.

The CA's private key exists only in this process's memory while the leaf is signed: it is never written to
disk and never enters the sandbox. The leaf's key is written to a folder only the grader's user can open,
never bound into the sandbox, and the helper deletes it once loaded. See docs/security.md.
"""

from __future__ import annotations

import datetime
import glob
import ipaddress
import os
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path

from grader._toml import tomllib

__all__ = ["RULES_PATH", "Host", "InterceptRulesError", "Interception", "load_hosts", "prepare"]

RULES_PATH = Path(__file__).resolve().parent / "rules" / "intercept.toml"
_HELPER = Path(__file__).resolve().parent / "_intercept_helper.py"
_CA_ENVS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
_HOST_LABEL = set("abcdefghijklmnopqrstuvwxyz0123456789-")


class InterceptRulesError(ValueError):
    """The rule file is wrong: one line naming the file, the entry and what to do."""


@dataclass(frozen=True)
class Host:
    """One intercepted name and what it puts before ``/v1/`` in its URLs (``/api`` for OpenRouter)."""

    name: str
    path_prefix: str = ""


@dataclass(frozen=True)
class Interception:
    """What one sandboxed run needs: see the module docstring."""

    hosts: tuple[Host, ...]
    helper: tuple[str, ...]  # run as the grader's user in the run's network namespace, before the run
    overlays: dict[str, Path]  # path inside the run -> file shown there read-only
    env: dict[str, str]  # the CA bundle variables
    ca_file: Path

    @property
    def path_prefixes(self) -> tuple[str, ...]:
        return tuple(sorted({h.path_prefix for h in self.hosts if h.path_prefix}))


def load_hosts(path: Path = RULES_PATH) -> tuple[Host, ...]:
    """The intercepted hosts of the rule file, validated (``InterceptRulesError``, one line)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InterceptRulesError(f"{path}: cannot read the interception rules: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InterceptRulesError(f"{path}: invalid TOML ({exc}); fix the syntax") from None
    if data.get("version") != 1 or not isinstance(data.get("hosts"), list) or not data["hosts"]:
        raise InterceptRulesError(f"{path}: expected 'version = 1' and at least one [[hosts]] entry")
    hosts: list[Host] = []
    for n, entry in enumerate(data["hosts"], 1):
        name = entry.get("name") if isinstance(entry, dict) else None
        prefix = entry.get("path_prefix", "") if isinstance(entry, dict) else ""
        labels = name.split(".") if isinstance(name, str) else []
        if len(labels) < 2 or not all(label and set(label) <= _HOST_LABEL for label in labels):
            raise InterceptRulesError(
                f"{path}: [[hosts]] entry {n}: 'name' must be a lower-case DNS name like api.openai.com "
                "(no wildcard, no port, no scheme)"
            )
        if not isinstance(prefix, str) or (prefix and (not prefix.startswith("/") or prefix.endswith("/"))):
            raise InterceptRulesError(
                f"{path}: [[hosts]] entry {n} ({name}): 'path_prefix' must start with / and not end with one"
            )
        unknown = sorted(set(entry) - {"name", "path_prefix"})
        if unknown:
            raise InterceptRulesError(f"{path}: [[hosts]] entry {n} ({name}): unknown key {unknown[0]!r}")
        hosts.append(Host(str(name), prefix))
    return tuple(hosts)


def _certificates(names: list[str]) -> tuple[bytes, bytes, bytes]:
    """(CA certificate PEM, leaf certificate PEM, leaf key PEM); the CA key is dropped on return."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Local development CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key = leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), leaf.public_bytes(pem), key


def _bundles(venv: Path | None) -> list[str]:
    """Files clients read as their trust store without asking the environment: certifi's, the system's."""
    found: list[str] = []
    if venv is not None:
        site = Path(os.path.abspath(venv)) / "lib" / "python*" / "site-packages"
        found += sorted(glob.glob(str(site / "certifi" / "cacert.pem")))
    system = (*_SYSTEM_BUNDLES, ssl.get_default_verify_paths().openssl_cafile or "")
    found += [os.path.realpath(p) for p in system if p]
    # Only regular files that are there: bwrap can show a file only over an existing one.
    return [p for p in dict.fromkeys(found) if p and os.path.isfile(p) and not os.path.islink(p)]


def prepare(
    public: Path,
    private: Path,
    *,
    forward_port: int,
    lifetime: float,
    venv: Path | None = None,
    rules: Path = RULES_PATH,
) -> Interception:
    """Write the run's hosts file and CA certificate to ``public`` (the run reads them) and the leaf chain
    and key to ``private`` (0700, the grader's user only: never shown to the run); return the plan.

    ``forward_port``: where the stand-in listens on the run's loopback. ``lifetime``: seconds the TLS end
    serves at most (the run's own timeout and a margin).
    """
    hosts = load_hosts(rules)
    names = [h.name for h in hosts]
    ca_pem, leaf_pem, key_pem = _certificates(names)
    public.mkdir(parents=True, exist_ok=True)
    private.mkdir(mode=0o700, parents=True, exist_ok=True)
    private.chmod(0o700)
    ca_file = public / "ca.pem"
    ca_file.write_bytes(ca_pem)
    ca_file.chmod(0o644)
    hosts_file = public / "hosts"
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    lines += [f"127.0.0.1\t{name}" for name in names]
    hosts_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hosts_file.chmod(0o644)
    chain = private / "chain.pem"
    fd = os.open(chain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(leaf_pem + ca_pem + key_pem)
    helper = (
        sys.executable,
        "-I",
        str(_HELPER),
        "--chain",
        str(chain),
        "--forward",
        str(int(forward_port)),
        "--lifetime",
        f"{max(1.0, float(lifetime)):g}",
    )
    overlays: dict[str, Path] = {"/etc/hosts": hosts_file}
    overlays.update({bundle: ca_file for bundle in _bundles(venv)})
    return Interception(hosts, helper, overlays, dict.fromkeys(_CA_ENVS, str(ca_file)), ca_file)
