"""Git remotes: one spelling per URL, the operator's patterns, and admission with the address to pin (no network:
every resolver here is a plain function)."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from controller.errors import ForbiddenRepoError, RemoteRefusedError, RemoteURLError, RepoError
from controller.wire.gitremote import (
    MAX_URL,
    Admitted,
    GitRemote,
    RemotePattern,
    admit,
    lookup,
    parse_pattern,
    parse_remote,
)

# ----------------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "url", "host", "port", "path"),
    [
        (
            "https://git.example.com/team/app.git",
            "https://git.example.com/team/app.git",
            "git.example.com",
            443,
            "/team/app.git",
        ),
        (
            "HTTPS://Git.Example.COM./Team/App.git",
            "https://git.example.com/Team/App.git",
            "git.example.com",
            443,
            "/Team/App.git",
        ),
        ("http://git.example.com:80/team/app", "http://git.example.com/team/app", "git.example.com", 80, "/team/app"),
        (
            "https://git.example.com:8443/a/b/c.git/",
            "https://git.example.com:8443/a/b/c.git",
            "git.example.com",
            8443,
            "/a/b/c.git",
        ),
        (
            "https://git.example.com/te%61m/caf%c3%a9",
            "https://git.example.com/team/caf%C3%A9",
            "git.example.com",
            443,
            "/team/caf%C3%A9",
        ),
        ("http://127.0.0.1:8080/me/app.git", "http://127.0.0.1:8080/me/app.git", "127.0.0.1", 8080, "/me/app.git"),
        ("https://[2001:DB8:0::1]/a", "https://[2001:db8::1]/a", "2001:db8::1", 443, "/a"),
        ("https://[::1]:3000/a", "https://[::1]:3000/a", "::1", 3000, "/a"),
        ("https://bücher.example/a", "https://xn--bcher-kva.example/a", "xn--bcher-kva.example", 443, "/a"),
    ],
)
def test_a_remote_has_one_spelling(text: str, url: str, host: str, port: int, path: str) -> None:
    remote = parse_remote(text)
    assert (remote.url, remote.host, remote.port, remote.path) == (url, host, port, path)
    assert parse_remote(remote.url) == remote and str(remote) == url


def test_the_display_form_is_short_and_marks_plain_http() -> None:
    assert parse_remote("https://git.example.com/team/app.git").display == "git.example.com/team/app.git"
    assert parse_remote("https://git.example.com:8443/a").display == "git.example.com:8443/a"
    assert parse_remote("http://git.example.com/a").display == "http://git.example.com/a"
    assert parse_remote("https://bücher.example/a").display == "xn--bcher-kva.example/a"  # no homographs


def test_full_width_characters_are_read_as_what_they_spell_then_judged() -> None:
    assert parse_remote("https://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/a").host == "127.0.0.1"
    assert parse_remote("https://\uff45xample.com/a").host == "example.com"


REFUSED = {
    "file:///etc/passwd": "not file://",
    "FILE:///etc/passwd": "not file://",
    "ssh://git@git.example.com/team/app.git": "not ssh://",
    "git://git.example.com/team/app.git": "not git://",
    "git+ssh://git.example.com/a": "not git+ssh://",
    "ftp://git.example.com/a": "not ftp://",
    "ext::sh -c touch% /tmp/pwned": "remote-helper",
    "fd::17": "remote-helper",
    "git@git.example.com:team/app.git": "scp-like",
    "git.example.com:team/app.git": "scp-like",
    "/srv/repos/app": "local path",
    "./app": "local path",
    "../app": "local path",
    "~/app": "local path",
    "app": "local path",
    "http:/git.example.com/a": "two slashes",
    "https://user:secret@git.example.com/a": "credentials",
    "https://token@git.example.com/a": "credentials",
    "https://@git.example.com/a": "credentials",
    "https://git.example.com/team/./app": "dot-segment",
    "https://git.example.com/team/../admin": "dot-segment",
    "https://git.example.com/team/%2e%2E/admin": "dot-segment",
    "https://git.example.com/team/%2e/app": "dot-segment",
    "https://git.example.com/team/..;/admin": "dot-segment",
    "https://git.example.com/team/..%3B/admin": "dot-segment",  # a server that decodes %3B first reads ..;
    "https://git.example.com/team/..%3b/admin": "dot-segment",
    "https://git.example.com/team/.%2E%3Bx/admin": "dot-segment",
    "https://git.example.com/team/..%3Bjsessionid=1/admin": "dot-segment",
    "https://git.example.com/..": "dot-segment",
    "https://git.example.com/team%2fadmin": "encoded slash",
    "https://git.example.com/team%2Fadmin": "encoded slash",
    "https://git.example.com/team%5cadmin": "encoded slash",
    "https://git.example.com/team%252e%252e": "encoded slash",
    "https://git.example.com/team%00": "encoded slash",
    "https://git.example.com/team\\admin": "backslash",
    "https://git.example.com\\@evil.com/a": "backslash",
    "https://git.example.com/a?x=1": "query",
    "https://git.example.com/a?": "query",
    "https://git.example.com/a#main": "fragment",
    "https://git.example.com/a b": "space",
    "https://git.example.com/a\tb": "space",
    "https://git.example.com/a\nb": "space",
    "https://git.example.com/a\x00": "control",
    "https://git.example.com/a\x7f": "control",
    "https://git.example.com/a\u202e": "control",
    " https://git.example.com/a": "space",
    "https:///a": "no host",
    "https://:443/a": "no host",
    "http://2130706433/a": "numeric spelling",
    "http://0177.0.0.1/a": "numeric spelling",
    "http://0x7f.1/a": "numeric spelling",
    "http://0x7f000001/a": "numeric spelling",
    "http://127.1/a": "numeric spelling",
    "http://127.0.1/a": "numeric spelling",
    "http://1.2.3.04/a": "numeric spelling",
    "http://1.0x7f/a": "numeric spelling",
    "http://[::ffff:127.0.0.1]/a": "IPv4-mapped",
    "http://[::ffff:7f00:1]/a": "IPv4-mapped",
    "http://[fe80::1%25eth0]/a": "zone",
    "http://[::1/a": "not closed",
    "http://[::1]x/a": "not closed",
    "http://[v1.x]/a": "not an IPv6 address",
    "http://::1/a": "brackets",
    "http://%31%32%37.0.0.1/a": "percent-encoded host",
    "https://git_lab.example.com/a": "not a host name",
    "https://-git.example.com/a": "not a host name",
    "https://git..example.com/a": "not a host name",
    "https://*.example.com/a": "not a host name",
    "https://stra\u00dfe.example/a": "xn-- form",
    "https://git.example.com:0/a": "not a port",
    "https://git.example.com:65536/a": "not a port",
    "https://git.example.com:+443/a": "not a port",
    "https://git.example.com:/a": "not a port",
    "https://git.example.com": "names no repository",
    "https://git.example.com/": "names no repository",
    "https://git.example.com//a": "empty path segment",
    "https://git.example.com/a//b": "empty path segment",
    "https://git.example.com/caf\u00e9": "percent-encode",
    "https://git.example.com/a<b": "percent-encode",
    "https://git.example.com/a%zz": "percent-encode",
    "https://git.example.com/" + "a" * MAX_URL: "longer than",
}


@pytest.mark.parametrize(("text", "reason"), list(REFUSED.items()), ids=[t[:40] for t in REFUSED])
def test_each_refused_spelling_says_why(text: str, reason: str) -> None:
    with pytest.raises(RemoteURLError) as caught:
        parse_remote(text)
    assert reason in str(caught.value)
    assert "CUBICLE_GIT_CREDENTIALS" in caught.value.hint


def test_a_refusal_never_shows_the_credentials() -> None:
    for text in (
        "https://alice:hunter2@git.example.com/a",
        "ssh://alice:hunter2@git.example.com/a",
        "alice:hunter2@h:a",
    ):
        with pytest.raises(RemoteURLError) as caught:
            parse_remote(text)
        assert "hunter2" not in str(caught.value) and "alice" not in str(caught.value), text
        assert "***@" in str(caught.value)


def test_a_refusal_shows_control_characters_escaped_and_long_text_cut() -> None:
    with pytest.raises(RemoteURLError) as caught:
        parse_remote("https://git.example.com/a\x1b]52;c;x\x07")
    assert "\x1b" not in str(caught.value) and "\\x1b" in str(caught.value)
    with pytest.raises(RemoteURLError) as caught:
        parse_remote("https://git.example.com/" + "a" * 5000)
    assert len(str(caught.value)) < 600


def test_refusals_are_repo_errors_so_validators_and_the_api_read_them() -> None:
    assert issubclass(RemoteURLError, RepoError) and issubclass(RemoteURLError, ValueError)
    with pytest.raises(ValidationError):
        GitRemote.model_validate("file:///etc/passwd")
    assert GitRemote.model_validate("https://git.example.com/a") == parse_remote("https://git.example.com/a")


def test_fields_given_apart_are_held_to_the_same_rules() -> None:
    fields = {"scheme": "https", "host": "git.example.com", "port": 443, "path": "/a"}
    assert GitRemote(**fields) == parse_remote("https://git.example.com/a")  # type: ignore[arg-type]
    for wrong in (
        {"host": "2130706433"},
        {"host": "Git.Example.com"},
        {"host": "git.example.com/evil"},
        {"host": "[::1]"},
        {"path": "/a/../b"},
        {"path": "a"},
        {"path": "/a/"},
        {"port": 0},
        {"scheme": "file"},
    ):
        with pytest.raises(ValidationError):
            GitRemote(**{**fields, **wrong})  # type: ignore[arg-type]


def test_a_remote_is_frozen() -> None:
    remote = parse_remote("https://git.example.com/a")
    with pytest.raises(ValidationError):
        remote.host = "127.0.0.1"  # type: ignore[misc]


# ----------------------------------------------------------------------------- patterns


def matches(pattern: str, url: str) -> bool:
    return parse_pattern(pattern).matches(parse_remote(url))


@pytest.mark.parametrize(
    ("pattern", "url"),
    [
        ("https://git.example.com/team/*", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/*", "https://GIT.example.com./team/app.git"),
        ("HTTPS://Git.Example.com/team/*", "https://git.example.com/team/app.git"),
        ("https://git.example.com:443/team/*", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/*", "https://git.example.com:443/team/app.git"),
        ("https://git.example.com/team/*", "https://git.example.com/team/app.git/"),
        ("https://git.example.com/team/*", "https://git.example.com/te%61m/app.git"),
        ("https://git.example.com/team/app.git", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/app?.git", "https://git.example.com/team/app2.git"),
        ("https://git.example.com/team/[ab]pp.git", "https://git.example.com/team/app.git"),
        ("https://git.example.com/*/app.git", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/**", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/**", "https://git.example.com/team/sub/group/app.git"),
        ("https://git.example.com/**/app.git", "https://git.example.com/a/b/app.git"),
        ("https://*.example.com/*", "https://git.example.com/app.git"),
        ("https://*.example.com/*/*", "https://GIT.Example.com/team/app.git"),
        ("http://127.0.0.1:8080/*", "http://127.0.0.1:8080/app.git"),
        ("https://[2001:db8::1]/*", "https://[2001:DB8:0:0::1]/app.git"),
        ("https://bücher.example/*", "https://xn--bcher-kva.example/app.git"),
    ],
)
def test_patterns_match(pattern: str, url: str) -> None:
    assert matches(pattern, url)


@pytest.mark.parametrize(
    ("pattern", "url"),
    [
        ("https://git.example.com/team/*", "https://git.example.com/team/sub/app.git"),  # * stays in its segment
        ("https://git.example.com/team/*", "https://git.example.com/team"),
        ("https://git.example.com/team/*", "https://git.example.com/teams/app.git"),
        ("https://git.example.com/team/*", "https://git.example.com/Team/app.git"),  # paths match in their case
        ("https://git.example.com/team/*", "https://git.example.com/other/team/app.git"),
        ("https://git.example.com/team/*", "http://git.example.com/team/app.git"),  # the scheme is the pattern's
        ("http://git.example.com/team/*", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/*", "https://git.example.com:8443/team/app.git"),  # the port is exact
        ("https://git.example.com:8443/team/*", "https://git.example.com/team/app.git"),
        ("http://127.0.0.1:8080/*", "http://127.0.0.1:8081/app.git"),
        ("http://127.0.0.1:8080/*", "http://127.0.0.1/app.git"),
        ("https://git.example.com/team/*", "https://git.example.com.evil.com/team/app.git"),
        ("https://git.example.com/team/*", "https://evil.com/git.example.com/team/app.git"),
        ("https://*.example.com/*", "https://evil.com/a.example.com/x"),
        ("https://*.example.com/*", "https://example.com/app.git"),  # * is one label, never none
        ("https://*.example.com/*", "https://a.b.example.com/app.git"),  # ...and never two
        ("https://*.example.com/*", "https://aexample.com/app.git"),
        ("https://*.example.com/*", "https://git.example.com.evil.com/app.git"),
        ("https://*.example.com/*", "https://git.example.com/team/app.git"),
        ("https://git.example.com/team/app.git", "https://git.example.com/team/app"),
        ("https://git.example.com/team/**", "https://git.example.com/team"),  # ** is one segment or more
        ("https://[2001:db8::1]/*", "https://[2001:db8::2]/app.git"),
        ("https://127.0.0.1/*", "https://localhost/app.git"),
    ],
)
def test_patterns_do_not_match(pattern: str, url: str) -> None:
    assert not matches(pattern, url)


def test_a_pattern_prints_in_its_normal_spelling_and_parses_back() -> None:
    for text, shown in [
        ("HTTPS://Git.Example.com:443/team/*", "https://git.example.com/team/*"),
        ("http://*.Example.com:8080/**", "http://*.example.com:8080/**"),
        ("https://[2001:DB8::1]/te%61m/*", "https://[2001:db8::1]/team/*"),
    ]:
        pattern = parse_pattern(text)
        assert str(pattern) == shown and parse_pattern(shown) == pattern
        assert RemotePattern.model_validate(pattern.model_dump()) == pattern


BAD_PATTERNS = {
    "git.example.com/team/*": "http:// or https://",
    "ssh://git.example.com/team/*": "http:// or https://",
    "*://git.example.com/team/*": "http:// or https://",
    "https://user:secret@git.example.com/*": "credentials",
    "https://*/team/*": "one DNS label",
    "https://*.*.example.com/*": "one DNS label",
    "https://git-*.example.com/*": "one DNS label",
    "https://git.*.com/*": "one DNS label",
    "https://*.com/*": "top-level domain",
    "https://*.127.0.0.1/*": "never an address",
    "https://*.0.0.1/*": "numeric spelling",
    "https://*.[::1]/*": "never an address",
    "https://git.example.com": "names no repository",
    "https://git.example.com/": "names no repository",
    "https://git.example.com/team/": "ends in /",
    "https://git.example.com/team/../*": "dot-segment",
    "https://git.example.com/team%2f*": "encoded slash",
    "https://git.example.com/**/team/**": "at most once",
    "https://git.example.com/team**": "whole path segment",
    "https://git.example.com/***": "whole path segment",
    "https://git.example.com/team/*#x": "fragment",
    "https://git.example.com/team/* ": "space",
    "https://2130706433/*": "numeric spelling",
    "https://git.example.com:99999/*": "not a port",
}


@pytest.mark.parametrize(("text", "reason"), list(BAD_PATTERNS.items()))
def test_a_malformed_pattern_is_a_value_error_that_says_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match="remote pattern") as caught:
        parse_pattern(text)
    assert reason in str(caught.value)
    assert "secret" not in str(caught.value)


def test_pattern_fields_given_apart_are_held_to_the_same_rules() -> None:
    fields = {"scheme": "https", "host": "*.example.com", "port": 443, "path": "/*"}
    assert RemotePattern(**fields) == parse_pattern("https://*.example.com/*")  # type: ignore[arg-type]
    for wrong in ({"host": "*"}, {"host": "*.com"}, {"host": "x.*.example.com"}, {"path": "/a/../*"}, {"path": ""}):
        with pytest.raises(ValidationError):
            RemotePattern(**{**fields, **wrong})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- admission


def resolver(*answers: str) -> Callable[[str, int], Iterable[str]]:
    """A resolver that answers every name with ``answers`` and records what it was asked."""

    def resolve(host: str, port: int) -> list[str]:
        resolve.asked.append((host, port))  # type: ignore[attr-defined]
        return list(answers)

    resolve.asked = []  # type: ignore[attr-defined]
    return resolve


def unresolvable(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


PUBLIC = "93.184.215.14"
PUBLIC6 = "2a04:4e42::223"
TEAM = [parse_pattern("https://git.example.com/team/*")]


def test_a_listed_remote_at_a_public_address_is_admitted_with_the_address_to_pin() -> None:
    resolve = resolver(PUBLIC, "151.101.0.223")
    admitted = admit(parse_remote("https://git.example.com/team/app.git"), TEAM, resolve)
    assert admitted == Admitted(remote=parse_remote("https://git.example.com/team/app.git"), address=PUBLIC)
    assert (admitted.host, admitted.port, admitted.address) == ("git.example.com", 443, PUBLIC)
    assert admitted.pin == f"git.example.com:443:{PUBLIC}"
    assert resolve.asked == [("git.example.com", 443)]  # type: ignore[attr-defined]


def test_the_pinned_address_is_the_first_one_checked_and_answers_are_read_once() -> None:
    resolve = resolver(PUBLIC6, PUBLIC, PUBLIC6)
    admitted = admit(parse_remote("https://git.example.com:8443/team/app.git"), None, resolve)
    assert admitted.address == PUBLIC6 and admitted.pin == f"git.example.com:8443:[{PUBLIC6}]"
    assert resolve.asked == [("git.example.com", 8443)]  # type: ignore[attr-defined]


def test_an_unlisted_remote_is_refused_naming_the_url_and_the_setting() -> None:
    with pytest.raises(RemoteRefusedError) as caught:
        admit(parse_remote("https://git.example.com/other/app.git"), TEAM, resolver(PUBLIC))
    assert "https://git.example.com/other/app.git" in str(caught.value) and "matches none" in str(caught.value)
    assert "CUBICLE_GIT_REMOTES" in caught.value.hint
    assert isinstance(caught.value, ForbiddenRepoError)


def test_an_empty_list_admits_nothing_and_asks_no_resolver() -> None:
    resolve = resolver(PUBLIC)
    with pytest.raises(RemoteRefusedError, match="CUBICLE_GIT_REMOTES is empty"):
        admit(parse_remote("https://git.example.com/team/app.git"), [], resolve)
    assert resolve.asked == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.5",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::a9fe:a9fe",
    ],
)
def test_a_wildcard_host_at_a_special_address_is_refused(address: str) -> None:
    pattern = [parse_pattern("https://*.example.com/team/*")]
    with pytest.raises(RemoteRefusedError) as caught:
        admit(parse_remote("https://git.example.com/team/app.git"), pattern, resolver(address))
    assert f"resolves to {ipaddress.ip_address(address)}" in str(
        caught.value
    ) and "https://git.example.com/team/app.git" in str(caught.value)
    assert "CUBICLE_GIT_REMOTES" in caught.value.hint


def test_one_special_address_among_public_ones_refuses_the_name() -> None:
    pattern = [parse_pattern("https://*.example.com/*")]
    for answers in [(PUBLIC, "10.0.0.5"), ("10.0.0.5", PUBLIC), (PUBLIC6, "::1", PUBLIC)]:
        with pytest.raises(RemoteRefusedError, match="special address"):
            admit(parse_remote("https://git.example.com/app.git"), pattern, resolver(*answers))


def test_a_special_address_is_admitted_when_a_pattern_names_the_host_exactly() -> None:
    remote = parse_remote("https://git.internal.example.com/team/app.git")
    exact = parse_pattern("https://git.internal.example.com/team/*")
    admitted = admit(remote, [exact], resolver("10.0.0.5", PUBLIC))
    assert admitted.address == "10.0.0.5" and admitted.pin == "git.internal.example.com:443:10.0.0.5"
    both = [parse_pattern("https://*.example.com/*"), exact]
    assert admit(remote, both, resolver("10.0.0.5")).address == "10.0.0.5"


def test_an_exact_host_admits_its_special_address_only_for_urls_that_pattern_matches() -> None:
    patterns = [parse_pattern("https://*.example.com/*/*"), parse_pattern("https://git.example.com/team/*")]
    assert admit(parse_remote("https://git.example.com/team/app.git"), patterns, resolver("10.0.0.5"))
    with pytest.raises(RemoteRefusedError, match="special address"):  # only the * pattern matches this path
        admit(parse_remote("https://git.example.com/other/app.git"), patterns, resolver("10.0.0.5"))


def test_a_loopback_address_named_literally_is_admitted_with_nothing_to_resolve() -> None:
    resolve = resolver(PUBLIC)
    admitted = admit(
        parse_remote("http://127.0.0.1:8080/me/app.git"), [parse_pattern("http://127.0.0.1:8080/**")], resolve
    )
    assert admitted.address == "127.0.0.1" and admitted.pin is None
    assert resolve.asked == []  # type: ignore[attr-defined]
    v6 = admit(parse_remote("http://[::1]:3000/me/app.git"), [parse_pattern("http://[::1]:3000/**")], resolve)
    assert v6.address == "::1" and v6.pin is None


def test_a_literal_address_is_judged_as_itself() -> None:
    with pytest.raises(RemoteRefusedError, match=re.escape("resolves to 169.254.169.254")):
        admit(parse_remote("http://169.254.169.254/latest"), None, resolver(PUBLIC))
    with pytest.raises(RemoteRefusedError, match="resolves to fd00::1"):
        admit(parse_remote("https://[fd00::1]/a"), None, resolver(PUBLIC))
    assert admit(parse_remote(f"https://[{PUBLIC6}]/a"), None, resolver()).address == PUBLIC6


def test_unrestricted_admits_any_public_remote_and_no_special_one() -> None:
    remote = parse_remote("https://anywhere.example.org/x/y/z.git")
    assert admit(remote, None, resolver(PUBLIC)).address == PUBLIC
    with pytest.raises(RemoteRefusedError, match="special address"):
        admit(parse_remote("http://localhost:3000/me/app.git"), None, resolver("127.0.0.1", "::1"))


def test_a_cli_user_s_own_patterns_name_hosts_without_restricting_the_rest() -> None:
    mine = [parse_pattern("http://localhost:3000/*")]
    assert admit(parse_remote("http://localhost:3000/app.git"), mine, resolver("127.0.0.1"), listed_only=False)
    assert admit(parse_remote("https://anywhere.example.org/a"), mine, resolver(PUBLIC), listed_only=False)
    with pytest.raises(RemoteRefusedError, match="special address"):
        admit(parse_remote("http://localhost:4000/app.git"), mine, resolver("127.0.0.1"), listed_only=False)


def test_a_host_that_does_not_resolve_is_a_remote_url_error() -> None:
    with pytest.raises(RemoteURLError, match="does not resolve") as caught:
        admit(parse_remote("https://git.example.com/team/app.git"), TEAM, unresolvable)
    assert "resolver" in caught.value.hint
    with pytest.raises(RemoteURLError, match="no address"):
        admit(parse_remote("https://git.example.com/team/app.git"), TEAM, resolver())


def test_a_resolver_answer_that_is_no_address_is_refused() -> None:
    with pytest.raises(RemoteRefusedError, match="resolver answered"):
        admit(parse_remote("https://git.example.com/team/app.git"), TEAM, resolver("evil.example.com"))


def test_the_system_resolver_answers_an_address_as_itself() -> None:
    assert lookup("127.0.0.1", 80) == ["127.0.0.1"]  # a numeric host: getaddrinfo asks no server


URL_PARTS = st.sampled_from(
    [
        "http",
        "https",
        "HTTP",
        "file",
        "ssh",
        "ext:",
        ":",
        "//",
        "/",
        "@",
        ".",
        "..",
        "%2e",
        "%2f",
        "%5c",
        "%41",
        "%",
        "?",
        "#",
        "[",
        "]",
        "::1",
        "127",
        "0x7f",
        "1",
        "a",
        "git.example.com",
        "xn--bcher-kva",
        "ü",
        "\uff0e",
        "\\",
        " ",
        "\x00",
        ";",
        "*",
        "-",
        "8080",
    ]
)  # fmt: skip - the pieces URLs are made of


@settings(max_examples=1000, deadline=None)
@given(st.lists(URL_PARTS, max_size=14).map("".join))
def test_whatever_parses_has_one_spelling_that_carries_nothing_refused(text: str) -> None:
    try:
        remote = parse_remote(text)
    except RemoteURLError:
        return
    assert parse_remote(remote.url) == remote and parse_remote(remote.url).url == remote.url
    after_scheme = remote.url.split("://", 1)[1]
    assert "@" not in after_scheme.split("/", 1)[0] and not any(c in remote.url for c in "?#\\ \x00")
    assert all(segment not in (".", "..", "") for segment in remote.path[1:].split("/"))
    assert remote.url.isascii() and "%2F" not in remote.url.upper() and "%2E" not in remote.url.upper()
