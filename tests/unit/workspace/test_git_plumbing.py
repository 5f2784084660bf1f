"""The pure parts of the remote-repository plumbing: the credential file and its matching, the helper's answers,
git's environment and config, what an error may quote, URLs and refs, and the names a tree may hold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.errors import GitError, GitRefError, GitTooLargeError, GitTreeError
from controller.workspace import gitcreds, gitmirror, gitrun, gittree

FILE = """\
# a comment, then a blank line

https://alice:t%40ken-1@git.example.com
http://bob:pw-2@git.example.com:8080/team/repo.git
https://carol:pw-3@other.example.com:8443
https://carol:pw-4@OTHER.example.com:8443/special
ssh://dave:pw-5@git.example.com
https://no-password@git.example.com
not a url at all
"""


def test_the_file_is_read_as_git_s_credential_store_writes_it() -> None:
    found = gitcreds.parse(FILE)
    assert [(c.protocol, c.host, c.port, c.path, c.username, c.password) for c in found] == [
        ("https", "git.example.com", 443, "", "alice", "t@ken-1"),
        ("http", "git.example.com", 8080, "team/repo.git", "bob", "pw-2"),
        ("https", "other.example.com", 8443, "", "carol", "pw-3"),
        ("https", "other.example.com", 8443, "special", "carol", "pw-4"),
    ]
    assert "t@ken-1" not in repr(found) and "pw-2" not in repr(found)


@pytest.mark.parametrize(
    ("request_lines", "password"),
    [
        ({"protocol": "https", "host": "git.example.com", "path": "any/repo.git"}, "t@ken-1"),
        ({"protocol": "https", "host": "git.example.com:443"}, "t@ken-1"),
        ({"protocol": "http", "host": "git.example.com:8080", "path": "team/repo.git"}, "pw-2"),
        ({"protocol": "http", "host": "git.example.com:8080", "path": "team/other.git"}, None),
        ({"protocol": "http", "host": "git.example.com"}, None),  # port 80: no line
        ({"protocol": "https", "host": "git.example.com:8443"}, None),
        ({"protocol": "https", "host": "other.example.com:8443", "path": "special"}, "pw-3"),  # the first line wins
        ({"protocol": "ssh", "host": "git.example.com"}, None),
        ({"protocol": "https", "host": "evil.example.com"}, None),
    ],
)
def test_a_request_matches_by_protocol_host_port_and_path(request_lines: dict[str, str], password: str | None) -> None:
    found = gitcreds.matching(gitcreds.parse(FILE), request_lines)
    assert (found.password if found else None) == password


def test_an_ipv6_host_matches_with_its_port() -> None:
    found = gitcreds.parse("http://u:p6@[::1]:9000\n")
    assert gitcreds.matching(found, {"protocol": "http", "host": "[::1]:9000"}) == found[0]


def test_the_helper_answers_get_and_never_writes_the_file(tmp_path: Path) -> None:
    file = tmp_path / "credentials"
    file.write_text(FILE)
    before = (file.read_bytes(), file.stat().st_mtime_ns)
    request = "protocol=https\nhost=git.example.com\nusername=alice\npassword=t@ken-1\n\n"
    answers = {
        action: subprocess.run(
            [sys.executable, "-I", "-S", gitcreds.__file__, str(file), action],
            input=request,
            capture_output=True,
            text=True,
            timeout=30,
        )
        for action in ("get", "store", "erase")
    }
    assert answers["get"].stdout == "username=alice\npassword=t@ken-1\n"
    assert answers["store"].stdout == answers["erase"].stdout == ""
    assert all(done.returncode == 0 and done.stderr == "" for done in answers.values())
    assert (file.read_bytes(), file.stat().st_mtime_ns) == before


def test_a_missing_file_answers_nothing(tmp_path: Path) -> None:
    assert gitcreds.answer("get", "protocol=https\nhost=a.example\n\n", tmp_path / "absent") == ""


def test_the_helper_is_named_by_the_file_alone(tmp_path: Path) -> None:
    (tmp_path / "credentials").write_text(FILE)
    config = dict(gitcreds.helper_config(tmp_path / "credentials"))
    assert config["credential.useHttpPath"] == "true"
    assert str(tmp_path / "credentials") in config["credential.helper"]
    assert "t@ken" not in config["credential.helper"] and "pw-2" not in config["credential.helper"]


HOSTILE = {
    "GIT_DIR": "/etc",
    "GIT_TRACE": "1",
    "GIT_TRACE_CURL": "/tmp/trace",
    "GIT_TRACE_PACKET": "1",
    "GIT_CURL_VERBOSE": "1",
    "GIT_SSH_COMMAND": "touch /tmp/owned",
    "GIT_ASKPASS": "/bin/echo",
    "SSH_ASKPASS": "/bin/echo",
    "GIT_SSL_NO_VERIFY": "1",
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/tmp/hooks",
    "GIT_CONFIG_PARAMETERS": "'core.fsmonitor'='touch /tmp/owned'",
    "http_proxy": "http://proxy.example:3128",
    "HTTPS_PROXY": "http://proxy.example:3128",
    "ALL_PROXY": "socks5://proxy.example",
    "no_proxy": "*",
    "CURL_CA_BUNDLE": "/tmp/ca",
    "SSL_CERT_FILE": "/tmp/ca",
    "HOME": "/root",
    "XDG_CONFIG_HOME": "/root/.config",
    "PATH": "/usr/bin:/bin",
}


def test_git_s_environment_is_built_not_inherited(tmp_path: Path) -> None:
    env = gitrun.scrubbed_env(HOSTILE, tmp_path)
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path),
        "LC_ALL": "C",
        "LANG": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LFS_SKIP_SMUDGE": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",
    }


def test_every_command_line_carries_the_hardening(tmp_path: Path) -> None:
    argv = gitrun.Git(tmp_path, (("credential.helper", "!ours"),)).argv(["fetch"])
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-c"]
    for needed in (
        "protocol.allow=never",
        "protocol.https.allow=always",
        "protocol.http.allow=always",
        "http.followRedirects=false",
        "http.proxy=",
        f"core.hooksPath={os.devnull}",
        "core.fsmonitor=false",
        "submodule.recurse=false",
        "transfer.fsckObjects=true",
        "core.protectNTFS=true",
        "core.protectHFS=true",
        "filter.lfs.smudge=",
        "gc.auto=0",
    ):
        assert needed in pairs
    assert pairs.index("credential.helper=") < pairs.index("credential.helper=!ours")  # ours after the reset
    assert argv[-1] == "fetch"


def test_the_hardened_git_ignores_what_the_environment_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real git under a hostile environment: it reads no config of it and lists only our settings."""
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    home = gitrun.home(tmp_path)
    shown = gitrun.Git(home).run(["config", "--list", "--show-origin"], tmp_path).decode()
    assert "hooksPath=/tmp/hooks" not in shown and "touch" not in shown
    assert {line.split("\t")[0] for line in shown.splitlines()} == {"command line:"}


def test_an_empty_home_is_required(tmp_path: Path) -> None:
    gitrun.home(tmp_path)
    (tmp_path / "git" / "home" / ".netrc").write_text("machine git.example.com login a password b\n")
    with pytest.raises(GitError, match="must be empty"):
        gitrun.home(tmp_path)


@pytest.mark.parametrize(
    ("said", "secret"),
    [
        ("fatal: unable to access 'https://alice:hunter22@git.example.com/r.git/': 401", "hunter22"),
        ("fatal: unable to access 'https://ghp_abcdef123456@git.example.com/r.git/'", "ghp_abcdef123456"),
        ("> Authorization: Basic YWxpY2U6aHVudGVyMjI=", "YWxpY2U6aHVudGVyMjI="),
        ("header: Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi"),
        ("error: password=hunter22 was refused", "hunter22"),
        ("remote: your token: glpat-xyz123 is expired", "glpat-xyz123"),
        ("remote: the value s3cr3t-v@lue is wrong", "s3cr3t-v@lue"),  # a secret the caller knows
    ],
)
def test_an_error_never_quotes_a_secret(said: str, secret: str) -> None:
    assert secret not in gitrun.redact(said, ["s3cr3t-v@lue"])


def test_an_error_quotes_git_s_last_lines_bounded_and_inert() -> None:
    stderr = b"".join(b"line %d\n" % n for n in range(100)) + b"fatal: \x1b]0;title\x07 the end\n"
    words = gitrun.last_words(stderr)
    assert words.endswith("fatal: ?]0;title? the end") and "line 90" not in words
    assert len(gitrun.last_words(b"x" * 100_000)) <= gitrun.MESSAGE_CHARS


def test_a_git_failure_names_the_command_and_hides_the_secret(tmp_path: Path) -> None:
    git = gitrun.Git(gitrun.home(tmp_path), secrets=("hunter22",))
    with pytest.raises(GitError) as caught:
        git.run(["rev-parse", "--verify", "hunter22"], tmp_path)
    assert "git rev-parse failed" in str(caught.value) and "hunter22" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("HTTPS://Git.Example.COM:443/Team/Repo.git/", "https://git.example.com/Team/Repo.git"),
        ("http://git.example.com:80/r", "http://git.example.com/r"),
        ("http://127.0.0.1:8080/r.git", "http://127.0.0.1:8080/r.git"),
        ("https://[::1]:8443/r", "https://[::1]:8443/r"),
    ],
)
def test_a_url_has_one_normal_form(url: str, normal: str) -> None:
    assert gitmirror.normalise(url) == normal
    assert gitmirror.key(gitmirror.normalise(url)) == gitmirror.key(normal)


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:token@git.example.com/r",
        "https://alice@git.example.com/r",
        "ssh://git.example.com/r",
        "file:///etc",
        "ext::sh -c touch% /tmp/x",
        "https://git.example.com/r?x=1",
        "https://git.example.com/r#frag",
        "https:///r",
        "https://git.example.com:99999/r",
    ],
)
def test_a_url_git_must_not_fetch_is_refused(url: str) -> None:
    with pytest.raises(GitError):
        gitmirror.normalise(url)


@pytest.mark.parametrize("ref", ["main", "v1.0", "feature/x", "abc1234", "refs/tags/v1", "a" * 40])
def test_plain_refs_pass(ref: str) -> None:
    gitmirror.check_ref(ref)


@pytest.mark.parametrize(
    "ref", ["", "--upload-pack=touch", "-x", "main~1", "main^", "a..b", "@{-1}", "a:b", "a b", "x\n", "x.lock", "/x"]
)
def test_a_ref_that_is_an_expression_or_option_is_refused(ref: str) -> None:
    with pytest.raises(GitRefError):
        gitmirror.check_ref(ref)


def test_a_pinned_address_must_match_the_url() -> None:
    url = "http://git.example.com:8080/r"
    assert gitmirror._resolve_entry(url, ("git.example.com", 8080, "10.0.0.5")) == "git.example.com:8080:10.0.0.5"
    assert gitmirror._resolve_entry("http://[::1]:8080/r", ("::1", 8080, "::1")) == "[::1]:8080:[::1]"
    for wrong in (("other.example.com", 8080, "10.0.0.5"), ("git.example.com", 80, "10.0.0.5")):
        with pytest.raises(GitError, match="pinned address"):
            gitmirror._resolve_entry(url, wrong)
    with pytest.raises(GitError, match="not an IP"):
        gitmirror._resolve_entry(url, ("git.example.com", 8080, "evil.example.com"))


@pytest.mark.parametrize(
    "name", [b"..", b".", b"", b".git", b".GIT", b".Git ", b".git.", b"git~1", b"GIT~2", b"a\0b", b"a/b"]
)
def test_names_this_host_must_not_write(name: bytes) -> None:
    assert gittree.unsafe_component(name)


@pytest.mark.parametrize("name", [b"a", b".gitignore", b".github", b"git", b"...", b".git-blame-ignore-revs"])
def test_names_a_tree_may_hold(name: bytes) -> None:
    assert not gittree.unsafe_component(name)


def test_a_tree_with_an_unsafe_path_is_refused_whole() -> None:
    entries = [
        gittree.TreeEntry("100644", "0" * 40, 1, b"ok"),
        gittree.TreeEntry("100644", "0" * 40, 1, b"a/.GIT/config"),
    ]
    with pytest.raises(GitTreeError, match="unsafe"):
        gittree.check_names(entries)
    with pytest.raises(GitTreeError):
        gittree.check_names([gittree.TreeEntry("100644", "0" * 40, 1, b"/etc/passwd")])


def test_a_listing_is_parsed_and_its_size_bounded() -> None:
    listing = (
        b"100644 blob " + b"a" * 40 + b"     12\tdir/file name\0"
        b"120000 blob " + b"b" * 40 + b"      3\tlink\0"
        b"160000 commit " + b"c" * 40 + b"       -\tsub\0"
    )
    entries = gittree.parse_listing(listing)
    assert [(e.mode, e.size, e.path) for e in entries] == [
        ("100644", 12, b"dir/file name"),
        ("120000", 3, b"link"),
        ("160000", 0, b"sub"),
    ]
    assert gittree.check_size(entries, gittree.TreeOptions(max_bytes=15)) == 15
    with pytest.raises(GitTooLargeError, match="15 bytes, more than the 14"):
        gittree.check_size(entries, gittree.TreeOptions(max_bytes=14))
    with pytest.raises(GitTooLargeError, match="3 entries"):
        gittree.check_size(entries, gittree.TreeOptions(max_entries=2))


def test_a_credentials_line_with_an_encoded_path_answers_that_repository(tmp_path: Path) -> None:
    """git sends the helper a repository's path decoded (``My Project``), as its own store helper compares it; a
    line's path is read decoded too, so a project with a space in its name gets its credential. (Found by the
    red-team of the remote sessions, through the real ``git credential fill``.)"""
    url = "https://dev.azure.com/org/My%20Project/_git/app"
    file = tmp_path / "credentials"
    file.write_text("https://bot:tok-1234@dev.azure.com/org/My%20Project/_git/app\n")
    git = gitrun.Git(gitrun.home(tmp_path / "data"), gitcreds.helper_config(file))
    answer = git.run(["credential", "fill"], tmp_path, stdin=f"url={url}\n\n".encode()).decode()
    assert "password=tok-1234" in answer, answer
