"""Network policies: the three levels, their order, host patterns, and clamping to a server's maximum."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from controller.wire.limits import Limits
from controller.wire.network import NONE, OPEN, NetworkPolicy, parse, parse_host


def test_levels_parse_and_print_back() -> None:
    assert parse("none") == NONE and parse(" OPEN ") == OPEN
    policy = parse("allow=pypi.org,*.pythonhosted.org,10.0.0.5:8080,[::1]:9000")
    assert policy.level == "allow"
    assert str(policy) == "allow=pypi.org,*.pythonhosted.org,10.0.0.5:8080,[::1]:9000"
    assert parse(str(policy)) == policy


@pytest.mark.parametrize(
    "text",
    ["nothing", "open=x", "allow=bad host", "allow=a..b", "allow=x:0", "allow=x:99999", "allow=-x.org", "allow=x:y"],
)
def test_bad_policies_are_value_errors_naming_the_form(text: str) -> None:
    with pytest.raises(ValueError):
        parse(text)


def test_booleans_of_old_records_still_load() -> None:
    assert Limits.model_validate({"network": False}).network == NONE
    assert Limits.model_validate({"network": True}).network == OPEN
    assert Limits.model_validate_json(Limits(network=parse("allow=a.org")).model_dump_json()).network == parse(
        "allow=a.org"
    )


def test_patterns_cover_hosts_and_ports() -> None:
    exact, wild = parse_host("pypi.org"), parse_host("*.example.org:8443")
    assert exact.covers("PyPI.org.", 443) and exact.covers("pypi.org", 80) and not exact.covers("pypi.org", 22)
    assert not exact.covers("evil.pypi.org", 443)
    assert wild.covers("example.org", 8443) and wild.covers("a.b.example.org", 8443)
    assert not wild.covers("badexample.org", 8443) and not wild.covers("a.example.org", 443)


def test_clamp_lowers_level_and_keeps_only_hosts_the_ceiling_covers() -> None:
    asked = parse("allow=a.example.org,b.other.org")
    assert asked.clamp(OPEN) == asked
    assert asked.clamp(NONE) == NONE
    assert OPEN.clamp(parse("allow=x.org")) == parse("allow=x.org")
    assert asked.clamp(parse("allow=*.example.org")) == parse("allow=a.example.org")
    assert asked.clamp(NetworkPolicy(level="allow")) == asked
    assert Limits(network=OPEN).clamp(Limits(network=NONE)).network == NONE


def test_hosts_only_with_allow() -> None:
    with pytest.raises(ValidationError):
        NetworkPolicy(level="open", hosts=("a.org",))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "a.org\nhttp_access allow all"},
        {"name": "a.org "},
        {"name": '"/etc/passwd"'},
        {"name": "-n"},
        {"name": "a.org\n"},
        {"name": "fe80::1%eth0"},
        {"name": "*.0.0.1"},
        {"name": "*.example.0x7f"},
        {"name": "a.org", "ports": []},
        {"name": "a.org", "ports": [0]},
        {"name": "a.org", "ports": [65536]},
    ],
)
def test_api_objects_get_the_same_checks_as_the_text_form(entry: dict[str, object]) -> None:
    """The API may send hosts as objects: they are checked like ``allow=...`` (a proxy's configuration is written from them)."""
    with pytest.raises(ValidationError):
        NetworkPolicy.model_validate({"level": "allow", "hosts": [entry]})


def test_names_are_lower_case_and_addresses_have_one_spelling() -> None:
    policy = NetworkPolicy.model_validate(
        {"level": "allow", "hosts": [{"name": "Api.Example.COM."}, {"name": "FD00:0:0::1"}, {"name": "*.Example.ORG"}]}
    )
    assert [host.name for host in policy.hosts] == ["api.example.com", "fd00::1", "*.example.org"]
    assert parse("allow=[fd00:0::1]:8443") == parse("allow=[FD00::1]:8443")


def test_variables_hold_the_text_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUBICLE_LIMITS__NETWORK, the server's ceiling and CUBICLE_SETUP_NETWORK read like --network (they were parsed as JSON and failed)."""
    from controller.config import Settings

    monkeypatch.setenv("CUBICLE_LIMITS__NETWORK", "allow=a.org,*.b.org:8443")
    monkeypatch.setenv("CUBICLE_MAX_LIMITS__NETWORK", "none")
    monkeypatch.setenv("CUBICLE_SETUP_NETWORK", "allow=pypi.org")
    settings = Settings()
    assert settings.setup_network == parse("allow=pypi.org")
    assert settings.limits.network == parse("allow=a.org,*.b.org:8443")
    assert settings.limits.clamp(settings.max_limits).network == NONE
