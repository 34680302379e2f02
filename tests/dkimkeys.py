"""RSA keys for DKIM, as a GM's ``dkim.pem`` (tests and benchmarks: made fresh, never kept)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def rsa_key(bits: int = 2048, exponent: int = 65537) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=exponent, key_size=bits)


def pem_of(key: rsa.RSAPrivateKey, *, pkcs8: bool = False) -> bytes:
    """The key's PEM: PKCS#1 (``BEGIN RSA PRIVATE KEY``, ``openssl genrsa -traditional``)
    or PKCS#8 (``BEGIN PRIVATE KEY``, what ``openssl genrsa`` writes now)."""
    shape = (
        serialization.PrivateFormat.PKCS8
        if pkcs8
        else serialization.PrivateFormat.TraditionalOpenSSL
    )
    return key.private_bytes(serialization.Encoding.PEM, shape, serialization.NoEncryption())


def key_file(folder: Path, bits: int = 2048) -> Path:
    """A new key in ``folder``/dkim.pem."""
    path = folder / "dkim.pem"
    path.write_bytes(pem_of(rsa_key(bits)))
    return path


def key_file_for_the_run(bits: int = 2048) -> Path:
    """A new key in a folder of its own, removed when the process ends (the benches')."""
    folder = Path(tempfile.mkdtemp(prefix="bench-dkim-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return key_file(folder, bits)
