from infrastructure.mime.authresults import dmarc_verdict, parse_authentication_results


def test_parses_authserv_id_methods_and_properties() -> None:
    ar = parse_authentication_results(
        "mx.Example.COM 1; spf=pass smtp.mailfrom=example.net;\r\n"
        ' dkim=pass (good signature) header.d=example.net header.s="sel 1";\r\n'
        " dmarc=FAIL (p=reject dis=none) header.from=example.net"
    )
    assert ar is not None
    assert ar.authserv_id == "mx.example.com"
    assert [(r.method, r.result) for r in ar.results] == [
        ("spf", "pass"),
        ("dkim", "pass"),
        ("dmarc", "fail"),
    ]
    assert ar.results[1].properties == (("header.d", "example.net"), ("header.s", "sel 1"))
    assert ar.result("dmarc") == "fail" and ar.result("arc") is None


def test_none_result_and_comments_with_semicolons() -> None:
    ar = parse_authentication_results("example.org (comment; with semicolon); none")
    assert ar is not None and ar.authserv_id == "example.org" and ar.results == ()
    ar = parse_authentication_results('"quoted.id"; dmarc=pass (a (nested) comment)')
    assert ar is not None and ar.authserv_id == "quoted.id" and ar.result("dmarc") == "pass"


def test_unreadable_values() -> None:
    assert parse_authentication_results("") is None
    assert parse_authentication_results("   ;;; ") is None
    ar = parse_authentication_results("mx; =broken; dmarc=; spf")
    assert ar is not None and ar.results == ()


def test_dmarc_verdict_only_trusts_the_configured_server() -> None:
    headers = [
        parse_authentication_results("attacker.example; dmarc=pass"),
        parse_authentication_results("mx.example.com; spf=fail"),
        parse_authentication_results("MX.example.com; dmarc=fail header.from=x.test"),
        parse_authentication_results("mx.example.com; dmarc=pass"),
    ]
    parsed = [h for h in headers if h is not None]
    assert dmarc_verdict(parsed, "mx.example.com") == "fail"
    assert dmarc_verdict(parsed, " MX.EXAMPLE.COM ") == "fail"
    assert dmarc_verdict(parsed, "other.example") is None
    assert dmarc_verdict(parsed, "") is None
    assert dmarc_verdict([], "mx.example.com") is None
