"""Benchmark: a DKIM signature on the mail we write, OpenSSL's RSA against dkimpy's own.

Every mail is signed when it is written (``snl_pbem.mail.dkim``), when the config has a
DKIM key: each acknowledgement in the intake's serial stage, and each report of a deadline
storm (20,000 at 1,000 games x 20 players). The same mail (acknowledgements and reports as
``compose`` writes them) is signed three ways in one process: as the server signs
(dkimpy's canonicalisation, OpenSSL's RSA), with dkimpy's own RSA (Python's ``pow``: what
it was), and the baseline, a bare OpenSSL signature of a SHA-256 digest of each message
(the RSA step alone). The signatures of the first two must be the same bytes.

Run: .venv/bin/python tests/benchmarks/bench_dkim.py [--messages 300] [--bits 2048]
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
import time
import types
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))
sys.path.insert(0, str(Path(__file__).parents[1]))

import dkim
from cryptography import __version__ as cryptography_version
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from dkimkeys import pem_of, rsa_key

from snl_pbem.mail import dkim as signing
from snl_pbem.mail.compose import compose, new_message_id


def mails(n: int) -> list[bytes]:
    now = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
    return [
        compose(
            sender="snl@example.org",
            sender_name="Snakes and Ladders",
            to=f"p{i}@example.org",
            subject=f"[g{i % 50}] Round 3",
            body=("Round 3: your dice are noted.\nDICE 4\nTRAPDOOR 12\n" * (1 + i % 4)),
            now=now,
            message_id=new_message_id("example.org"),
            game_name=f"g{i % 50}",
            broadcast=i % 2 == 0,
            in_reply_to=None if i % 2 == 0 else f"<m{i}@example.org>",
        )
        for i in range(n)
    ]


def timed(raws: list[bytes], key: bytes) -> tuple[float, list[bytes]]:
    """Seconds for the best of three passes of ``snl_pbem.mail.dkim.sign``, and the signed
    mail (with whichever RSA step dkimpy calls now)."""
    best, out = float("inf"), []
    for _ in range(3):
        started = time.perf_counter()
        out = [
            signing.sign(raw, selector="snl", domain="example.org", private_key=key) for raw in raws
        ]
        best = min(best, time.perf_counter() - started)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--bits", type=int, default=2048)
    args = parser.parse_args()
    key = rsa_key(args.bits)
    pem = pem_of(key)
    raws = mails(args.messages)
    n = len(raws)
    print(
        f"bench_dkim: Python {platform.python_version()}, cryptography {cryptography_version}, "
        f"{n} mails, a {args.bits}-bit key"
    )
    assert dkim.RSASSA_PKCS1_v1_5_sign is signing._openssl_sign  # as the server signs
    python_sign, fell_back = signing._PYTHON_SIGN, []
    signing._PYTHON_SIGN = lambda digest, key: fell_back.append(1) or python_sign(digest, key)
    try:
        served, signed = timed(raws, pem)
    finally:
        signing._PYTHON_SIGN = python_sign
    assert not fell_back, "OpenSSL did not sign: dkimpy's own did"
    dkim.RSASSA_PKCS1_v1_5_sign = python_sign
    try:
        before, before_signed = timed(raws, pem)
    finally:
        dkim.RSASSA_PKCS1_v1_5_sign = signing._openssl_sign
    # the same bytes (the signing time, t=, fixed for the comparison)
    clock = dkim.time
    dkim.time = types.SimpleNamespace(time=lambda: 1_796_500_000.0)  # dkimpy's only
    try:
        ours = [
            signing.sign(raw, selector="snl", domain="example.org", private_key=pem) for raw in raws
        ]
        dkim.RSASSA_PKCS1_v1_5_sign = signing._PYTHON_SIGN
        theirs = [
            signing.sign(raw, selector="snl", domain="example.org", private_key=pem) for raw in raws
        ]
    finally:
        dkim.time = clock
        dkim.RSASSA_PKCS1_v1_5_sign = signing._openssl_sign
    assert ours == theirs and len(signed) == len(before_signed) == n, "the signatures differ"
    bare = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for raw in raws:
            key.sign(hashlib.sha256(raw).digest(), padding.PKCS1v15(), _prehashed())
        bare = min(bare, time.perf_counter() - started)
    for name, seconds in (("served (OpenSSL)", served), ("dkimpy's own RSA", before)):
        print(
            f"  {name:18s} {1e3 * seconds / n:6.2f} ms a mail = {n / seconds:7.0f} a second; "
            f"{seconds / bare:5.2f}x the bare RSA step (baseline {1e3 * bare / n:.2f} ms)"
        )
    print(f"  served / dkimpy's own: {served / before:.3f}; the signatures the same bytes")


def _prehashed() -> object:
    from cryptography.hazmat.primitives.asymmetric import utils

    return utils.Prehashed(hashes.SHA256())


if __name__ == "__main__":
    main()
