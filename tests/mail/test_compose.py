"""Outgoing messages: well-formed, threaded, loop-proof, and safe from injected headers."""

from __future__ import annotations

import base64
import email
import email.policy
from datetime import UTC, datetime

import pytest

from snl_pbem.mail.compose import compose, header_text, new_message_id


def build(**overrides: object) -> bytes:
    args = dict(
        sender="snl@example.org",
        sender_name="Snakes and Ladders referee",
        to="ann@example.org",
        subject="Re: [g1] orders",
        body="Hello ann,\n\nDice: 4\n",
        now=datetime(2026, 11, 30, 9, 0, tzinfo=UTC),
        message_id="<snl.1@example.org>",
        game_name="g1",
        auto_submitted="auto-replied",
        in_reply_to="<a@x.org>",
        references=("<root@x.org>",),
    )
    args.update(overrides)
    return compose(**args)  # type: ignore[arg-type]


def parsed(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


def test_a_reply_is_well_formed_and_threaded() -> None:
    raw = build()
    msg = parsed(raw)
    assert msg["From"] == "Snakes and Ladders referee <snl@example.org>"
    assert msg["Reply-To"] == "snl@example.org" and msg["Auto-Submitted"] == "auto-replied"
    assert msg["In-Reply-To"] == "<a@x.org>" and msg["References"] == "<root@x.org> <a@x.org>"
    assert msg["List-Id"] is None and msg["Precedence"] is None  # personal, not list mail
    assert msg["X-SNL-PBEM-Game"] == "g1"
    assert msg.get_content().replace("\r\n", "\n") == "Hello ann,\n\nDice: 4\n"
    assert all(line.endswith(b"\r") or not line for line in raw.split(b"\n")[:-1])
    assert max(len(line) for line in raw.split(b"\r\n")) <= 78
    assert not msg.defects


def test_unicode_and_long_lines_survive() -> None:
    body = "Caf\u00e9 \u2014 \U0001f3b2 " + "x" * 300 + "\nend\n"
    msg = parsed(build(subject="Re: d\u00e9s \u00e0 jouer \U0001f3b2", body=body))
    assert msg["Subject"] == "Re: d\u00e9s \u00e0 jouer \U0001f3b2"
    assert msg.get_content().replace("\r\n", "\n") == body


def test_player_text_cannot_inject_headers() -> None:
    evil = "orders\r\nBcc: everyone@example.org\r\n\r\nfake body"
    msg = parsed(build(subject=evil, in_reply_to="<a@x.org>\r\nBcc: x@y.org"))
    assert msg["Bcc"] is None and "\n" not in msg["Subject"]
    assert len(header_text("y" * 5000)) == 200
    assert parsed(build(in_reply_to="not an id"))["In-Reply-To"] is None


def test_message_ids_are_unique() -> None:
    ids = {new_message_id("example.org") for _ in range(10000)}
    assert len(ids) == 10000 and all(i.endswith("@example.org>") for i in ids)
    assert all(len(i) == len("<snl.@example.org>") + 32 for i in ids)  # 128 bits each


def test_a_forked_process_never_repeats_its_parents_message_ids() -> None:
    """Message-IDs take their random bits from bytes drawn a few kilobytes at a time (one
    draw a message cost the intake's writer about 85 us a message, issue 23): a process
    forked with some drawn and not used yet (the sandbox's workers, a service's children)
    draws its own, and never hands out the ones its parent goes on to hand out."""
    import multiprocessing

    new_message_id("example.org")  # bytes drawn, most not used yet
    context = multiprocessing.get_context("fork")
    here, there = context.Pipe()

    def child() -> None:
        there.send([new_message_id("example.org") for _ in range(50)])

    process = context.Process(target=child)
    process.start()
    theirs = here.recv()
    process.join(60)
    assert process.exitcode == 0
    ours = [new_message_id("example.org") for _ in range(50)]
    assert len(set(theirs) | set(ours)) == 100


def test_dkim_signed_mail_verifies(tmp_path) -> None:
    """With [mail.dkim], every queued message carries a signature a receiver can check."""
    import base64
    import shutil
    import subprocess

    import dkim
    import pytest
    from mailhelpers import T0, game_config

    from snl_pbem.app.outbox import enqueue_mail
    from snl_pbem.config import load_config
    from snl_pbem.store import Database
    from snl_pbem.store.migrate import upgrade

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test key")
    key = tmp_path / "dkim.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    public = subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    upgrade(db)
    path = tmp_path / "c.toml"
    game_config(path, db.url)
    path.write_text(
        path.read_text().replace(
            "[[games]]", '[mail.dkim]\nselector = "snl"\nprivate_key_file = "dkim.pem"\n\n[[games]]'
        )
    )
    config = load_config(path)
    with db.transaction() as s:
        row = enqueue_mail(
            s,
            config,
            game=None,
            kind="notice",
            to="ann@example.org",
            now=T0,
            template="player/notice.txt.j2",
            subject="hello",
            player=None,
            message="signed",
            line_problems=(),
        )
        raw = row.message
    db.dispose()
    assert raw.startswith(b"DKIM-Signature:")
    record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)

    def dns(name: bytes, timeout: int = 5) -> bytes:
        assert name == b"snl._domainkey.example.org."
        return record

    assert dkim.verify(raw, dnsfunc=dns)
    assert not dkim.verify(raw.replace(b"signed", b"forged"), dnsfunc=dns)


def test_dkim_signatures_are_openssls_and_byte_for_byte_dkimpys(monkeypatch) -> None:
    """Issue 23: the RSA step of a DKIM signature is OpenSSL's, not Python's ``pow`` (6 ms
    a signature, holding the interpreter, for every mail written). PKCS#1 v1.5 is
    deterministic: the signed bytes are dkimpy's own, for keys of three shapes (sizes,
    exponents, PKCS#1 and PKCS#8 files) and mail of every shape we send; a hash or key
    OpenSSL is not given falls back to dkimpy's. Each key's PEM is parsed once, not for
    every mail; one that cannot be parsed is refused every time."""
    import hashlib
    import types

    import dkim
    import dkim.crypto
    from cryptography.hazmat.primitives import serialization
    from dkimkeys import pem_of, rsa_key

    from snl_pbem.mail import dkim as signing

    calls: list[str] = []
    python_sign = signing._PYTHON_SIGN

    def counted(digest, key):  # dkimpy's own, counted
        calls.append(digest.name)
        return python_sign(digest, key)

    monkeypatch.setattr(signing, "_PYTHON_SIGN", counted)
    # t= alike in both (dkimpy's own clock only: the process's stays as it is)
    monkeypatch.setattr(dkim, "time", types.SimpleNamespace(time=lambda: 1_796_500_000.0))
    openssl: list[int] = []
    make_key = signing._key

    def key_of(numbers):  # OpenSSL's key, counted
        openssl.append(numbers[0].bit_length())
        return make_key(numbers)

    monkeypatch.setattr(signing, "_key", key_of)
    parsed: list[bytes] = []
    python_parse = signing._PYTHON_PARSE

    def parse_of(pem):  # dkimpy's parse of a PEM, counted
        parsed.append(pem)
        return python_parse(pem)

    monkeypatch.setattr(signing, "_PYTHON_PARSE", parse_of)
    now = datetime(2026, 12, 5, 18, 0, tzinfo=UTC)
    mails = [
        compose(
            sender="snl@example.org",
            sender_name="Snakes and Ladders",
            to=to,
            subject=subject,
            body=body,
            now=now,
            message_id=new_message_id("example.org"),
            game_name="g1",
            broadcast=broadcast,
            in_reply_to="<a@example.org>" if not broadcast else None,
        )
        for to, subject, body, broadcast in [
            ("ann@example.org", "Round 3", "DICE 4\nTRAPDOOR 12\n", False),
            ("bob@example.org", "第 3 轮", "你好，裁判。\n" * 40, True),  # noqa: RUF001
            ("chai@example.org", "รอบที่ 3", "สวัสดี\n\n\n", False),
        ]
    ]
    pems = []
    for bits, exponent, pkcs8 in [(1024, 65537, False), (2048, 65537, True), (1024, 3, False)]:
        key = rsa_key(bits, exponent)
        pem = pem_of(key, pkcs8=pkcs8)
        pems.append(pem)
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        record = b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)
        for raw in mails:
            fast = signing.sign(raw, selector="snl", domain="example.org", private_key=pem)
            assert calls == []  # OpenSSL's
            with monkeypatch.context() as python:
                python.setattr(dkim, "RSASSA_PKCS1_v1_5_sign", python_sign)
                slow = signing.sign(raw, selector="snl", domain="example.org", private_key=pem)
            assert fast == slow
            assert dkim.verify(fast, dnsfunc=lambda name, timeout=5, record=record: record)

    assert openssl == [1024] * 3 + [2048] * 3 + [1024] * 3  # each signature OpenSSL's
    assert parsed == pems  # each key parsed once, for its six signatures
    for _ in range(2):  # a key that cannot be parsed: refused each time, as before
        with pytest.raises(dkim.KeyFormatError):
            signing.sign(mails[0], selector="snl", domain="example.org", private_key=b"no key")
    assert parsed == [*pems, b"no key", b"no key"]

    # what OpenSSL is not given here goes to dkimpy's own, which signs as it always did:
    # a key whose numbers do not agree (OpenSSL refuses it; dkimpy signs, wrongly) ...
    numbers = dkim.crypto.parse_pem_private_key(pem)
    broken = {**numbers, "exponent1": numbers["exponent1"] + 2}
    digest = hashlib.sha256(b"the headers")
    assert signing._openssl_sign(digest, broken) == python_sign(digest, broken)
    assert calls == ["sha256"]

    # ... and a hash OpenSSL is not given here
    class Sha512:
        name = "sha512"

        def digest(self) -> bytes:
            return b"\0" * 64

    with pytest.raises(KeyError) as refused:  # dkimpy knows no sha512: refused as before
        signing._openssl_sign(Sha512(), numbers)
    assert refused.value.__context__ is None  # not chained to anything of OpenSSL's
    assert calls == ["sha256", "sha512"]


def test_the_date_field_is_each_times_own_in_its_zone_and_fold() -> None:
    """The Date field is made once for a time (a round's reports share it), but one instant
    in two zones, and the two times of an hour a clock goes back over, keep their own."""
    from email.utils import format_datetime
    from zoneinfo import ZoneInfo

    london = datetime(2026, 10, 25, 1, 30, tzinfo=ZoneInfo("Europe/London"))  # twice
    times = [
        london,
        london.replace(fold=1),
        london.astimezone(UTC),
        london.astimezone(ZoneInfo("Asia/Bangkok")),
        london,
    ]
    for now in times:
        assert parsed(build(now=now))["Date"] == format_datetime(now), now
    assert len({parsed(build(now=now))["Date"] for now in times}) == 4
