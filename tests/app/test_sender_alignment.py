"""Only our own MTA's Authentication-Results, read by RFC 8601's grammar, vouch for a From
address, and only for a signing domain aligned with it (issue 20, "DKIM alignment").

A vouched-for sender's keyless mail is answered on the player's own reply budget; so a
forger who could pass for vouched-for (``dkim=pass header.d=example.org.evil.example``
for ann@example.org) could spend ann's budget and silence her real STATUS."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from mailhelpers import T0, replies_since
from sqlalchemy import select

from snl_pbem.app.intake import ingest
from snl_pbem.config import load_config
from snl_pbem.mail.authresults import aligned, parse, vouched
from snl_pbem.store import InboundMessage

OURS = "mx.example.org"

# Fields as the MTAs write them (folded as they fold them), each with whether it vouches
# for ann@example.org when the referee's MTA is mx.example.org.
REAL = {
    "opendkim": (
        "mx.example.org;\r\n\tdkim=pass (2048-bit key; unprotected) header.d=example.org"
        " header.i=@example.org header.a=rsa-sha256 header.s=mail header.b=AbCdEfGh",
        True,
    ),
    "opendkim_quoted_b": (
        "mx.example.org;\r\n\tdkim=pass (1024-bit key; secure) header.d=example.org"
        ' header.i=@example.org header.b="Xy/Zq+3a"',
        True,
    ),
    "opendmarc": ("mx.example.org; dmarc=pass (p=reject dis=none) header.from=example.org", True),
    "opendmarc_no_policy_dkim_pass": (
        "mx.example.org; dkim=pass (2048-bit key) header.d=example.org header.s=s1\r\n"
        "mx.example.org; dmarc=none (p=none dis=none) header.from=example.org",
        True,
    ),
    "opendmarc_spf_only": (
        "mx.example.org; spf=pass smtp.mailfrom=example.org\r\n"
        "mx.example.org; dmarc=none (p=none dis=none) header.from=example.org",
        False,
    ),
    "rspamd": (
        "mx.example.org;\r\n\tdkim=pass header.d=example.org header.s=dkim header.b=Xy1Zq2Ab;"
        "\r\n\tspf=pass (mx.example.org: domain of ann@example.org designates 192.0.2.1 as"
        " permitted sender) smtp.mailfrom=ann@example.org;\r\n\tdmarc=pass (policy=reject)"
        " header.from=example.org",
        True,
    ),
    "rspamd_no_signature": (
        "mx.example.org;\r\n\tdkim=none;\r\n\tspf=pass (mx.example.org: domain of"
        " ann@example.org designates 192.0.2.1 as permitted sender)"
        ' smtp.mailfrom=ann@example.org;\r\n\tdmarc=fail reason="No valid SPF, No valid DKIM"'
        " header.from=example.org (policy=none)",
        False,
    ),
    "gmail_format": (  # Gmail names the signer by header.i only
        "mx.example.org;\r\n       dkim=pass header.i=@example.org header.s=20230601"
        " header.b=AbCdEfGh;\r\n       arc=pass (i=1 spf=pass spfdomain=example.org dkim=pass"
        " dkdomain=example.org dmarc=pass fromdomain=example.org);\r\n       spf=pass"
        " (google.com: domain of ann@example.org designates 209.85.220.41 as permitted sender)"
        " smtp.mailfrom=ann@example.org;\r\n       dmarc=pass (p=NONE sp=NONE dis=NONE)"
        " header.from=example.org",
        True,
    ),
    "microsoft_format": (  # Exchange Online writes no authserv-id: never ours
        "spf=pass (sender IP is 40.107.22.41)\r\n smtp.mailfrom=example.org; dkim=pass"
        " (signature was verified)\r\n header.d=example.org;dmarc=pass action=none\r\n"
        " header.from=example.org;compauth=pass reason=100",
        False,
    ),
    "upper_case": ("MX.EXAMPLE.ORG; DKIM=PASS header.D=EXAMPLE.ORG header.S=Mail", True),
    "version_and_none": ("mx.example.org 1; none", False),
}

FORGED = {
    "lookalike_suffix": "mx.example.org; dkim=pass header.d=example.org.evil.example",
    "lookalike_hyphen": "mx.example.org; dkim=pass header.d=example.org-mail.example",
    "lookalike_prefix": "mx.example.org; dkim=pass header.d=myexample.org",
    "lookalike_identity": "mx.example.org; dkim=pass header.i=@example.org.evil.example",
    "bare_tld": "mx.example.org; dkim=pass header.d=org",
    "header_d_in_a_comment": (
        "mx.example.org; dkim=pass (header.d=example.org) header.d=evil.example"
    ),
    "only_a_comment": "mx.example.org; dkim=pass (header.d=example.org; ok)",
    "dkim_pass_in_a_quoted_string": (
        'mx.example.org; spf=fail smtp.mailfrom="dkim=pass header.d=example.org"@evil.example'
    ),
    "semicolon_in_a_quoted_string": (
        'mx.example.org; spf=fail smtp.mailfrom="x; dkim=pass header.d=example.org"@evil.example'
    ),
    "dkim_pass_as_a_reason": (
        'mx.example.org; dkim=fail reason="dkim=pass header.d=example.org" header.d=evil.example'
    ),
    "two_results_one_failing": (
        "mx.example.org; dkim=fail header.d=example.org; dkim=pass header.d=evil.example"
    ),
    "dmarc_pass_for_another_from": "mx.example.org; dmarc=pass header.from=evil.example",
    "dmarc_pass_elsewhere_dkim_aligned": (
        "mx.example.org; dkim=pass header.d=example.org; dmarc=pass header.from=evil.example"
    ),
    "dmarc_fail_beside_a_pass": (
        "mx.example.org; dkim=pass header.d=example.org; dmarc=fail header.from=example.org"
    ),
    "dmarc_pass_naming_no_from": "mx.example.org; dmarc=pass (p=reject)",
    "unclosed_comment": "mx.example.org; dkim=fail (oops; dkim=pass header.d=example.org",
    "another_authserv_id": "evil.example; dkim=pass header.d=example.org",
    "lookalike_authserv_id": "mx.example.org.evil.example; dkim=pass header.d=example.org",
    "authserv_id_in_a_comment": "(mx.example.org) evil.example; dkim=pass header.d=example.org",
}


def message(fields: str, tag: str, body: str = "DICE 6", sender: str = "ann@example.org") -> bytes:
    """A message as our Postfix hands it over: its Received and Authentication-Results
    on top, then what the sender's client wrote."""
    head = "".join(f"Authentication-Results: {f}\r\n" for f in split_fields(fields))
    return (
        "Return-Path: <ann@example.org>\r\n"
        "Received: from mail.example.org (mail.example.org [192.0.2.1])\r\n"
        "\tby mx.example.org (Postfix) with ESMTPS id 4Xyz1ABCDEF\r\n"
        "\tfor <snl@example.org>; Sat, 01 Dec 2029 12:00:00 +0000 (UTC)\r\n"
        f"{head}"
        f"From: Ann <{sender}>\r\n"
        "To: snl@example.org\r\n"
        "Subject: [g1] orders\r\n"
        "Date: Sat, 01 Dec 2029 11:59:58 +0000\r\n"
        f"Message-ID: <{tag}@example.org>\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        f"{body}\r\n"
    ).encode()


def split_fields(fields: str) -> list[str]:
    """Several fields of one table entry (each starts on a line of its own)."""
    out: list[str] = []
    for line in fields.split("\r\n"):
        if out and line[:1] in (" ", "\t"):
            out[-1] += "\r\n" + line
        else:
            out.append(line)
    return out


@pytest.fixture
def authenticated(intake, tmp_path: Path):
    """The started game, its MTA's authserv-id set (mx.example.org)."""
    db, _ = intake
    path = tmp_path / "config.toml"
    text = path.read_text()
    assert 'referee = "ref@example.org"' in text
    path.write_text(
        text.replace(
            'referee = "ref@example.org"', f'referee = "ref@example.org"\nauthserv_id = "{OURS}"'
        )
    )
    return db, load_config(path)


@pytest.fixture
def sqlite_authenticated(sqlite_intake, tmp_path: Path):
    db, _ = sqlite_intake
    path = tmp_path / "config.toml"
    text = path.read_text()
    path.write_text(
        text.replace(
            'referee = "ref@example.org"', f'referee = "ref@example.org"\nauthserv_id = "{OURS}"'
        )
    )
    return db, load_config(path)


def test_real_and_forged_results_through_the_intake(sqlite_authenticated) -> None:
    """Each entry as a keyless message from ann an hour apart (so no budget is met): a
    vouched-for message gets a player's notice, any other the guests' notice."""
    db, config = sqlite_authenticated
    table = {**REAL, **{name: (value, False) for name, value in FORGED.items()}}
    got = {}
    for i, (name, (fields, _)) in enumerate(table.items()):
        before = len(replies_since(db, T0))
        ingest(db, config, message(fields, f"t{i}"), T0 + timedelta(hours=2 * i), "t")
        new = replies_since(db, T0)[before:]
        assert [r.recipient for r in new] == ["ann@example.org"], name
        assert new[0].kind in ("notice", "guest-notice"), (name, new[0].kind)
        got[name] = new[0].kind == "notice"
    assert got == {name: expected for name, (_, expected) in table.items()}


def test_only_our_own_fields_are_stored(sqlite_authenticated) -> None:
    db, config = sqlite_authenticated
    fields = (
        "mx.example.org; dkim=pass header.d=example.org\r\n"
        "evil.example; dmarc=pass header.from=example.org"
    )
    result = ingest(db, config, message(fields, "stored"), T0, "t")
    with db.transaction() as s:
        stored = s.scalar(
            select(InboundMessage.auth_results).where(InboundMessage.id == result.inbound_id)
        )
    assert stored == "mx.example.org; dkim=pass header.d=example.org"


@pytest.mark.parametrize(
    ("from_domain", "signer", "expected"),
    [
        ("example.org", "example.org", True),
        ("mail.example.org", "example.org", True),  # relaxed: a parent signs for its subdomain
        ("a.b.example.org", "example.org", True),
        ("example.org", "mail.example.org", False),  # a child never signs for its parent
        ("example.org", "example.org.evil.example", False),
        ("example.org", "example.org-mail.example", False),
        ("example.org", "myexample.org", False),
        ("example.org", "org", False),  # never a bare TLD
        ("example.co.uk", "co.uk", True),  # no Public Suffix List: documented
        ("example.co.uk", "uk", False),
    ],
)
def test_alignment_is_on_label_boundaries(from_domain, signer, expected) -> None:
    assert aligned(from_domain, signer) is expected
    field = f"{OURS}; dkim=pass header.d={signer}"
    assert vouched([field], OURS, from_domain) is expected


@pytest.mark.parametrize(
    ("from_domain", "field", "expected"),
    [
        ("bücher.example", "dkim=pass header.d=xn--bcher-kva.example", True),
        ("xn--bcher-kva.example", "dkim=pass header.d=bücher.example", True),
        ("example.org", "dkim=pass header.d=example.org.", True),
        ("example.org", 'dkim=pass header.d="example.org"', True),
        ("example.org", "dkim=pass header.d=example.org header.d=evil.example", False),
        ("example.org", "dkim=pass header.i=ann@example.org", True),
        ("example.org", "dkim=pass header.d=evil.example header.i=@example.org", False),
        ("example.org", "dkim = pass\r\n\t(comment) header.d = example.org", True),
        ("example.org", "dkim=pass header.d=exa(comment)mple.org", False),
        ("example.org", "dkim/1=pass header.d=example.org", True),
        ("example.org", "dkim=pass policy.d=example.org", False),
    ],
)
def test_values_are_read_whole(from_domain, field, expected) -> None:
    assert vouched([f"{OURS}; {field}"], OURS, from_domain) is expected


def test_the_grammar() -> None:
    parsed = parse(
        'mx.example.org 1; dkim=pass (2048-bit key; "unprotected") header.d=example.org'
        ' header.b="ab;c"; spf=fail smtp.mailfrom="a b"@evil.example; none'
    )
    assert parsed is not None and parsed.authserv_id == "mx.example.org"
    assert [(r.method, r.result) for r in parsed.results] == [("dkim", "pass"), ("spf", "fail")]
    assert parsed.results[0].properties == {"header.d": "example.org", "header.b": "ab;c"}
    assert parsed.results[1].properties == {"smtp.mailfrom": "a b@evil.example"}
    assert parse('mx.example.org; dkim=pass header.b="unclosed') is None
    assert parse("mx.example.org extra words; dkim=pass") is None


def test_a_forged_lookalike_flood_does_not_silence_the_player(authenticated) -> None:
    """25 keyless mails from ann's address, each with a genuine dkim=pass for a look-alike
    domain the forger owns, then ann's own STATUS with her key: it is answered."""
    db, config = authenticated
    forged = (
        f"{OURS};\r\n\tdkim=pass header.d=example.org.evil.example header.s=mail header.b=AbCdEfGh"
    )
    for i in range(25):
        raw = message(forged, f"forged{i}", "DICE 6")
        ingest(db, config, raw, T0 + timedelta(seconds=i), "t")
    kinds = [r.kind for r in replies_since(db, T0) if r.recipient == "ann@example.org"]
    assert kinds and set(kinds) == {"guest-notice"} and len(kinds) <= 3, kinds
    real = (
        f"{OURS};\r\n\tdkim=pass (2048-bit key; unprotected) header.d=example.org"
        " header.i=@example.org header.s=mail"
    )
    ingest(
        db,
        config,
        message(real, "real", "KEY ann-key-123\r\nSTATUS"),
        T0 + timedelta(minutes=1),
        "t",
    )
    last = [r for r in replies_since(db, T0) if r.recipient == "ann@example.org"][-1]
    assert last.kind == "status"
