"""A setup's network: the package managers' own registries by default, ``defaults,allow=...`` added to them, and
what the setup's proxy refused said with the setting that allows it (no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from controller.config import NPM_DEFAULT_REGISTRY, Settings, package_hosts
from controller.environment import load
from controller.environment.preparation import Environments
from controller.environment.refusals import refused_text
from controller.errors import DefinitionError, SetupError
from controller.sandbox.egress import Refusal, refusals, squid_config
from controller.wire.envspec import Environment, EnvironmentRequest
from controller.wire.network import MAX_HOSTS, DefaultsPlus, NetworkPolicy, parse


def hosts_of(policy: NetworkPolicy) -> list[str]:
    return [str(host) for host in policy.hosts]


# --------------------------------------------------------------------------- the spellings


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("defaults", "defaults"),
        ("defaults,allow=a.test,b.test:8443", "defaults,allow=a.test,b.test:8443"),
        (" DEFAULTS , allow=A.test ", "defaults,allow=a.test"),
        ("defaults,allow=", "defaults"),
    ],
)
def test_defaults_and_hosts_are_read_and_written_back_the_same(text: str, shown: str) -> None:
    env = Environment(setup_network=text)
    assert isinstance(env.setup_network, DefaultsPlus) and str(env.setup_network) == shown
    assert env.model_dump(mode="json")["setup_network"] == shown
    assert Environment.model_validate(env.model_dump(mode="json")) == env
    request = EnvironmentRequest.model_validate({"setup_network": text})
    assert str(request.setup_network) == shown


@pytest.mark.parametrize("text", ["none", "open", "allow=pypi.org,files.pythonhosted.org", "allow=a.test:8080"])
def test_the_existing_spellings_still_replace_the_defaults(text: str) -> None:
    env = Environment(setup_network=text)
    assert env.setup_network == parse(text) and type(env.setup_network) is NetworkPolicy


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("defaults,open", "only hosts are added to the defaults"),
        ("defaults,none", "only hosts are added to the defaults"),
        ("defaults,x.org", "only hosts are added to the defaults"),
        ("defaults,allow=not a host", "'not a host' is not a host name"),
        ("defaultsx", "the network is none, open or allow="),
    ],
)
def test_a_wrong_spelling_says_how_to_write_it(text: str, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        Environment(setup_network=text)


def test_a_definition_file_says_which_key_is_wrong(tmp_path: Path) -> None:
    (tmp_path / ".cubicle").mkdir()
    (tmp_path / ".cubicle/environment.toml").write_text('setup_network = "defaults,allow=a.test"\n')
    assert str(load(tmp_path).setup_network) == "defaults,allow=a.test"
    (tmp_path / ".cubicle/environment.toml").write_text('setup_network = "defaults,open"\n')
    with pytest.raises(DefinitionError, match=r"key 'setup_network'.*only hosts are added to the defaults"):
        load(tmp_path)


# --------------------------------------------------------------------------- what the setup then reaches


def environments(default: str, ceiling: str = "open") -> Environments:
    settings = Settings(setup_network=default, max_limits={"network": ceiling})  # type: ignore[arg-type]
    return Environments(settings, lambda directory: None)


def test_defaults_add_to_the_servers_default_setup_network() -> None:
    envs = environments("allow=pypi.org,deb.debian.org:80")
    added = envs.setup_network(Environment(setup_network="defaults,allow=npm.example.org,pypi.org"))
    assert hosts_of(added) == ["pypi.org", "deb.debian.org:80", "npm.example.org"]
    assert envs.setup_network(Environment(setup_network="defaults")) == parse("allow=pypi.org,deb.debian.org:80")
    assert envs.setup_network(Environment(setup_network="allow=a.test")) == parse("allow=a.test")  # replaces
    assert envs.setup_network(Environment()) == parse("allow=pypi.org,deb.debian.org:80")


def test_defaults_over_none_or_open_and_under_the_servers_ceiling() -> None:
    assert environments("none").setup_network(Environment(setup_network="defaults,allow=a.test")) == parse(
        "allow=a.test"
    )
    assert environments("none").setup_network(Environment(setup_network="defaults")) == parse("none")
    assert environments("open").setup_network(Environment(setup_network="defaults,allow=a.test")) == parse("open")
    capped = environments("allow=pypi.org", ceiling="allow=pypi.org,*.example.org")
    assert capped.setup_network(Environment(setup_network="defaults,allow=x.example.org,a.test")) == parse(
        "allow=pypi.org,x.example.org"
    )


def test_more_hosts_than_a_policy_holds_is_a_setup_error_naming_the_definition() -> None:
    many = ",".join(f"h{n}.test" for n in range(MAX_HOSTS))
    envs = environments("allow=pypi.org")
    with pytest.raises(SetupError, match=r"setup network of \.cubicle/environment\.toml.*at most 64"):
        envs.setup_network(Environment(source=".cubicle/environment.toml", setup_network=f"defaults,allow={many}"))


# --------------------------------------------------------------------------- the package managers' defaults


def test_npm_and_pip_defaults_are_allowed_when_nothing_names_others(tmp_path: Path) -> None:
    found = [str(host) for host in package_hosts({}, root=tmp_path, home=tmp_path / "home")]
    assert "registry.npmjs.org" in NPM_DEFAULT_REGISTRY and "registry.npmjs.org:443" in found
    assert "pypi.org:443" in found  # asked of the pip installed here


def test_a_machines_own_registries_replace_the_built_in_defaults(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/pip.conf").write_text("[global]\nindex-url = https://pip.mirror.test/simple\n")
    (home / ".npmrc").write_text("; a comment\nregistry=https://npm.mirror.test:8443/\n")
    found = [str(host) for host in package_hosts({}, root=tmp_path, home=home)]
    assert found == ["pip.mirror.test:443", "npm.mirror.test:8443"]
    named = package_hosts({"npm_config_registry": "http://npm.vars.test/"}, root=tmp_path, home=home)
    assert "npm.vars.test:80" in [str(host) for host in named] and "npm.mirror.test:8443" not in map(str, named)


# --------------------------------------------------------------------------- what the proxy refused


LOG = "\n".join(
    [
        "1765090000.123      0 172.18.0.3 TCP_DENIED/403 3900 CONNECT registry.npmjs.org:443 - ERR_CUBICLE_NOT_ALLOWED "
        "registry.npmjs.org 443",
        "1765090000.124      0 172.18.0.3 TCP_TUNNEL/200 3900 CONNECT pypi.org:443 151.101.0.223 - pypi.org 443",
        "1765090000.125     30 172.18.0.3 NONE_NONE/503 3900 GET http://nowhere.test:8080/ - ERR_READ_ERROR nowhere.test 8080",
        "1765090000.126      0 172.18.0.3 TCP_DENIED/403 3900 CONNECT registry.npmjs.org:443 - ERR_CUBICLE_NOT_ALLOWED "
        "registry.npmjs.org 443",
        "x 0 y TCP_DENIED/403 0 GET http://evil/ - ERR_CUBICLE_NOT_ALLOWED evil;rm\x1b[2J 80",
        "1765090000.127      3 172.18.0.3 TCP_MISS/503 0 GET http://closed.test:8080/ 10.1.2.3 ERR_CONNECT_FAIL "
        "closed.test 8080",
        "1765090000.128      3 172.18.0.3 TCP_MISS/502 0 GET http://slow.test/ 10.1.2.4 ERR_READ_ERROR slow.test 80",
        "garbage",
    ]
)


def test_the_proxys_log_gives_each_refused_or_unreachable_host_once_and_nothing_odd() -> None:
    assert refusals(LOG) == [
        Refusal("registry.npmjs.org", 443, "ERR_CUBICLE_NOT_ALLOWED"),
        Refusal("nowhere.test", 8080, "ERR_DNS_FAIL"),  # squid 5 says ERR_READ_ERROR, with no address
        Refusal("closed.test", 8080, "ERR_CONNECT_FAIL"),
        Refusal("slow.test", 80, "ERR_READ_ERROR"),
    ]
    assert refusals(LOG, most=1) == [Refusal("registry.npmjs.org", 443, "ERR_CUBICLE_NOT_ALLOWED")]


def test_the_proxy_logs_what_refusals_reads() -> None:
    config = squid_config(parse("allow=pypi.org"), "172.30.0.0/16")
    assert "access_log stdio:/dev/stdout cubicle" in config.splitlines()
    assert any(
        line.startswith("logformat cubicle ") and line.endswith(" %<a %err_code %>rd %>rP")
        for line in config.splitlines()
    )


def test_a_refusal_names_the_host_and_the_setting_of_the_definition_that_allows_it() -> None:
    found = refusals(LOG)
    said = refused_text(found, Environment(source=".cubicle/environment.toml"))
    assert "registry.npmjs.org (not on the allow-list), nowhere.test:8080 (its name does not resolve)," in said
    assert "slow.test (no answer came from it)" in said
    assert 'setup_network = "defaults,allow=registry.npmjs.org" in .cubicle/environment.toml' in said
    assert "CUBICLE_SETUP_NETWORK" in said
    devcontainer = refused_text(found, Environment(source=".devcontainer/devcontainer.json"))
    assert 'customizations.cubicle.setup_network = "defaults,allow=registry.npmjs.org"' in devcontainer
    unresolved = refused_text([Refusal("nowhere.test", 8080, "ERR_DNS_FAIL")], Environment())
    assert "nowhere.test:8080 (its name does not resolve)" in unresolved and "allow=" not in unresolved
    assert refused_text([], Environment()) == ""


@pytest.mark.parametrize(
    ("asked", "suggested"),
    [
        ("defaults,allow=a.test", '"defaults,allow=a.test,registry.npmjs.org"'),
        ("allow=a.test:8080", '"allow=a.test:8080,registry.npmjs.org"'),  # a policy of its own stays one
    ],
)
def test_the_suggested_setting_keeps_the_hosts_the_definition_lists(asked: str, suggested: str) -> None:
    found = [Refusal("registry.npmjs.org", 443, "ERR_CUBICLE_NOT_ALLOWED")]
    said = refused_text(found, Environment(source=".cubicle/environment.toml", setup_network=asked))
    assert f"setup_network = {suggested} in .cubicle/environment.toml" in said
