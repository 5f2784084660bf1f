"""The Kubernetes objects of docs/kubernetes.md: valid against the official schemas, hardened as the Docker sandbox.

No cluster is needed: the objects are checked against the Kubernetes OpenAPI schemas that ``kubernetes-validate``
ships (strict: an unknown field fails), and read field by field against the Limits they were made from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from controller.config import DEFAULT_IMAGE
from controller.errors import SandboxError
from controller.sandbox import kubernetes
from controller.sandbox.docker import HOME, WORKSPACE, container_options
from controller.sandbox.egress import PORT, PROXY_UID, ROLE
from controller.sandbox.images import SANDBOX
from controller.sandbox.kubernetes import (
    CheckoutCopy,
    Cluster,
    Manifest,
    Owner,
    Proxy,
    SandboxImage,
    manifests,
    session_manifests,
)
from controller.sandbox.owners import SESSION
from controller.wire.limits import Limits
from controller.wire.network import NONE, OPEN, SPECIAL, NetworkPolicy, parse
from controller.workspace.layer import Layer, LayerInfo

VERSIONS = ("1.33", "1.37")
"""The oldest Kubernetes the design relies on (user namespaces and supplementalGroupsPolicy on by default) and the
newest whose schemas kubernetes-validate ships."""
SESSION_ID = "s_0123456789abcdef"
UID, GID = 1000, 1001
CHECKOUT_MB = 300
LIMIT_SETS = {
    "default": Limits(),
    "smallest": Limits(memory_mb=64, cpus=0.001, pids=16, tmpfs_mb=16, disk_mb=32, inodes=1024),
    "fractional": Limits(memory_mb=1536, cpus=0.3, pids=300, tmpfs_mb=100, disk_mb=2048),
    "largest": Limits(memory_mb=65536, cpus=64, pids=32768, tmpfs_mb=16384, disk_mb=1 << 22, inodes=1 << 30),
}
ALLOW = parse("allow=pypi.org,*.pythonhosted.org:443,10.1.2.3:8080,[2001:db8::1]:9000")
NETWORKS = {"none": NONE, "allow": ALLOW, "open": OPEN}
IMAGE_VOLUMES = ("/data", "/var/lib/postgresql/data")
IMAGE = SandboxImage(DEFAULT_IMAGE, IMAGE_VOLUMES)
CHECKOUT = CheckoutCopy(UID, GID, CHECKOUT_MB)
CASES = [
    *[(limits, network, runtime) for network in NETWORKS for runtime in ("runc", "runsc") for limits in ["default"]],
    *[(limits, network, "runc") for limits in LIMIT_SETS if limits != "default" for network in NETWORKS],
]
ROLE_GROUP = "rbac.authorization.k8s.io"
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def limits_of(limits: str, network: str) -> Limits:
    return Limits(**{**LIMIT_SETS[limits].model_dump(), "network": NETWORKS[network]})


def generate(limits: Limits, runtime: kubernetes.Runtime = "runc", **extra: Any) -> list[Manifest]:
    return manifests(SESSION_ID, IMAGE, limits, checkout=CHECKOUT, runtime=runtime, **extra)


def one(objects: list[Manifest], kind: str, role: str | None = None, name: str | None = None) -> Manifest:
    found = [
        m
        for m in objects
        if m["kind"] == kind
        and (role is None or m["metadata"]["labels"].get(ROLE) == role or m["metadata"]["name"].endswith(f"-{role}"))
        and (name is None or m["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (kind, role, [m["metadata"]["name"] for m in found])
    return found[0]


def container(pod: Manifest) -> dict[str, Any]:
    assert len(pod["spec"]["containers"]) == 1 and "initContainers" not in pod["spec"]
    return dict(pod["spec"]["containers"][0])


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def docker_options(limits: Limits, route: Any = None) -> dict[str, Any]:
    """What the Docker sandbox would be created with for the same session."""
    layer = Layer(Path("/nonexistent"), LayerInfo(repo="/r", uid=UID, gid=GID, dev=0, ino=0))
    return container_options(DEFAULT_IMAGE, layer, limits, {SESSION: SESSION_ID}, route, IMAGE_VOLUMES)


# ----------------------------------------------------------------------------- valid objects


def check_names(manifest: Manifest) -> None:
    """What the API server checks beyond the schema's shapes: names, label keys and values."""
    meta = manifest["metadata"]
    pattern = DNS_LABEL if manifest["kind"] in ("Service", "Namespace") else DNS_SUBDOMAIN
    assert pattern.fullmatch(meta["name"]) and len(meta["name"]) <= 63, meta["name"]
    for key in {**meta.get("labels", {}), **meta.get("annotations", {})}:
        assert LABEL_NAME.fullmatch(key), key
    for value in meta.get("labels", {}).values():
        assert LABEL_VALUE.fullmatch(value), value


def test_cluster_objects_are_valid_kubernetes() -> None:
    for manifest in kubernetes.cluster_manifests():
        check_names(manifest)
        for version in VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)


@pytest.mark.parametrize(("limits", "network", "runtime"), CASES)
def test_session_objects_are_valid_kubernetes(limits: str, network: str, runtime: kubernetes.Runtime) -> None:
    objects = session_manifests(
        SESSION_ID,
        IMAGE,
        limits_of(limits, network),
        checkout=CHECKOUT,
        runtime=runtime,
        proxy=kubernetes.EXAMPLE_PROXY,
        owner=Owner("cubicle-controller-host", "6f1c1a4e-3b7d-4a0e-9f51-0c2f5b8e1d2a"),
    )
    assert {m["kind"] for m in objects} == {"PersistentVolumeClaim", "Pod", "NetworkPolicy"} | (
        {"Service"} if network == "allow" else set()
    )
    for manifest in objects:
        check_names(manifest)
        assert manifest["metadata"]["namespace"] == kubernetes.SANDBOX_NAMESPACE
        for version in VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_strict_validation_does_catch_an_unknown_field() -> None:
    """So the test above proves something: a misspelt field fails it."""
    pod = one(generate(Limits()), "Pod", "sandbox")
    pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFs"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, VERSIONS[-1], strict=True)


# ----------------------------------------------------------------------------- the sandbox Pod's hardening


@pytest.mark.parametrize(("limits", "network", "runtime"), CASES)
def test_the_pod_carries_every_hardening(limits: str, network: str, runtime: kubernetes.Runtime) -> None:
    wanted = limits_of(limits, network)
    objects = generate(wanted, runtime)
    pod = one(objects, "Pod", "sandbox")
    spec, box = pod["spec"], container(pod)
    security = box["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
    assert security["runAsNonRoot"] is True and (security["runAsUser"], security["runAsGroup"]) == (UID, GID)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["appArmorProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["supplementalGroupsPolicy"] == "Strict"
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == kubernetes.SANDBOX_ACCOUNT
    assert spec["hostNetwork"] is False and spec["hostPID"] is False and spec["hostIPC"] is False
    assert spec["enableServiceLinks"] is False and spec["shareProcessNamespace"] is False
    assert spec["restartPolicy"] == "Never"
    assert all("hostPath" not in volume for volume in spec["volumes"])
    assert all("hostPort" not in port for port in box.get("ports", []))
    resources = box["resources"]
    assert resources["limits"] == resources["requests"]  # Guaranteed QoS: no swap under any kubelet setting
    assert resources["limits"]["memory"] == f"{wanted.memory_mb}Mi"
    assert millicores(resources["limits"]["cpu"]) == max(1, round(wanted.cpus * 1000))
    assert pod["metadata"]["annotations"][kubernetes.PIDS_ANNOTATION] == str(wanted.pids)
    if runtime == "runsc":
        assert spec["runtimeClassName"] == kubernetes.GVISOR and "hostUsers" not in spec
    else:
        assert "runtimeClassName" not in spec and spec["hostUsers"] is False


@pytest.mark.parametrize("limits", LIMIT_SETS)
def test_each_tmpfs_is_a_sized_memory_emptydir(limits: str) -> None:
    wanted = limits_of(limits, "none")
    pod = one(generate(wanted), "Pod", "sandbox")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounted = {m["mountPath"]: volumes[m["name"]] for m in container(pod)["volumeMounts"]}
    for path in ("/tmp", HOME, *IMAGE_VOLUMES):
        assert mounted[path]["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{wanted.tmpfs_mb}Mi"}, path
    assert set(mounted) == {"/tmp", HOME, *IMAGE_VOLUMES, WORKSPACE}  # nothing else is writable


def test_the_workspace_is_the_sessions_claim_sized_for_checkout_and_quota() -> None:
    wanted = limits_of("fractional", "none")
    objects = generate(wanted)
    pod, claim = one(objects, "Pod", "sandbox"), one(objects, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (workspace,) = [m for m in container(pod)["volumeMounts"] if m["mountPath"] == WORKSPACE]
    assert volumes[workspace["name"]]["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"]}
    assert container(pod)["workingDir"] == WORKSPACE
    assert claim["spec"]["accessModes"] == ["ReadWriteOncePod"]  # never two Pods on one workspace
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{CHECKOUT_MB + wanted.disk_mb}Mi"
    assert claim["spec"]["storageClassName"] == Cluster().storage_class


def test_the_toolbox_is_execd_beside_a_pid_1_that_runs_nothing() -> None:
    """Pid 1 is the waiter; the toolbox the controller execs is the image's CMD, so the image serves both."""
    box = container(one(generate(Limits()), "Pod", "sandbox"))
    assert box["command"] == kubernetes.PAUSE and "args" not in box
    assert box["stdin"] is False and box["tty"] is False  # the main process reads nothing: exec brings its own stdin
    dockerfile = SANDBOX.dockerfile.read_text()
    (cmd,) = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert json.loads(cmd.removeprefix("CMD ")) == kubernetes.TOOLBOX


@pytest.mark.parametrize("network", NETWORKS)
def test_environment_and_resolver_follow_the_policy(network: str) -> None:
    pod = one(generate(limits_of("default", network)), "Pod", "sandbox")
    env = {item["name"]: item["value"] for item in container(pod)["env"]}
    assert env["HOME"] == HOME
    proxy = f"http://{kubernetes.EXAMPLE_PROXY_ADDRESS}:{PORT}"
    assert (env.get("HTTPS_PROXY"), env.get("https_proxy")) == ((proxy, proxy) if network == "allow" else (None, None))
    if network == "open":
        assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    else:  # as the Docker sandbox's empty resolv.conf: a lookup fails at once, names are the proxy's to resolve
        assert pod["spec"]["dnsPolicy"] == "None"
        assert pod["spec"]["dnsConfig"]["nameservers"] == [kubernetes.NO_RESOLVER]


# Each Docker option of the sandbox, and how its counterpart is found in the Pod (NODE_LEVEL: none per Pod).
COUNTERPARTS = {
    "image": lambda v, pod: container(pod)["image"] == v,
    "user": lambda v, pod: v == "{runAsUser}:{runAsGroup}".format(**container(pod)["securityContext"]),
    "working_dir": lambda v, pod: container(pod)["workingDir"] == v,
    "stdin_open": lambda v, pod: container(pod)["stdin"] is False,  # exec opens the toolbox's stdin instead
    "tty": lambda v, pod: container(pod)["tty"] is v,
    "environment": lambda v, pod: {e["name"]: e["value"] for e in container(pod)["env"]} == v,
    "labels": lambda v, pod: v.items() <= pod["metadata"]["labels"].items(),
    "hostname": lambda v, pod: pod["spec"]["hostname"] == v,
    "mounts": lambda v, pod: (
        {m["Target"] for m in v if m["Type"] == "volume"} <= {m["mountPath"] for m in container(pod)["volumeMounts"]}
    ),
    "tmpfs": lambda v, pod: set(v) <= {m["mountPath"] for m in container(pod)["volumeMounts"]},
    "read_only": lambda v, pod: container(pod)["securityContext"]["readOnlyRootFilesystem"] is v,
    "cap_drop": lambda v, pod: container(pod)["securityContext"]["capabilities"]["drop"] == v,
    "security_opt": lambda v, pod: container(pod)["securityContext"]["allowPrivilegeEscalation"] is False,
    "network_mode": lambda v, pod: pod["spec"]["hostNetwork"] is False,
    "dns": lambda v, pod: pod["spec"]["dnsPolicy"] == "None",
    "mem_limit": lambda v, pod: container(pod)["resources"]["limits"]["memory"] == v.replace("m", "Mi"),
    "memswap_limit": lambda v, pod: container(pod)["resources"]["requests"] == container(pod)["resources"]["limits"],
    "nano_cpus": lambda v, pod: millicores(container(pod)["resources"]["limits"]["cpu"]) * 1_000_000 >= v,
    "ipc_mode": lambda v, pod: pod["spec"]["hostIPC"] is False,
    "devices": lambda v, pod: v == [] and container(pod)["securityContext"]["privileged"] is False,
}


@pytest.mark.parametrize("network", NETWORKS)
def test_every_docker_option_has_its_counterpart_or_a_named_replacement(network: str) -> None:
    wanted = limits_of("fractional", network)
    route = kubernetes._route(SESSION_ID, wanted.network, kubernetes.EXAMPLE_PROXY_ADDRESS)
    options = docker_options(wanted, route)
    pod = one(generate(wanted), "Pod", "sandbox")
    unaccounted = set(options) - set(COUNTERPARTS) - set(kubernetes.NODE_LEVEL)
    assert unaccounted == set(), "a Docker option with neither a Pod field nor a node-level replacement"
    for key, value in options.items():
        if key in COUNTERPARTS:
            assert COUNTERPARTS[key](value, pod), key


def test_the_options_with_no_pod_field_name_their_node_level_replacement() -> None:
    assert {"pids_limit", "ulimits", "log_config"} <= set(kubernetes.NODE_LEVEL)
    assert "podPidsLimit" in kubernetes.NODE_LEVEL["pids_limit"]
    assert "containerLogMaxSize" in kubernetes.NODE_LEVEL["log_config"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("privileged", True),
        ("cap_add", ["SYS_ADMIN"]),
        ("read_only", False),
        ("cap_drop", ["NET_RAW"]),
        ("security_opt", ["seccomp=unconfined"]),
        ("memswap_limit", "4096m"),
        ("devices", ["/dev/fuse:/dev/fuse:rwm"]),
        ("ipc_mode", "host"),
        ("log_config", {"Type": "syslog", "Config": {}}),
        ("ulimits", [{"Name": "core", "Soft": -1, "Hard": -1}]),
        ("mounts", [{"Type": "bind", "Source": "/", "Target": "/host", "ReadOnly": True}]),
        ("tmpfs", {"/tmp": "rw,suid"}),
    ],
)
def test_a_docker_option_without_a_mapping_is_refused(key: str, value: Any) -> None:
    """A hardening added to (or loosened in) the Docker sandbox must be mapped before a Pod is made."""
    options = {**docker_options(Limits()), key: value}
    with pytest.raises(ValueError, match="no Pod counterpart"):
        kubernetes.pod(options, name="x", role="sandbox", namespace="ns", claim="c")


def test_a_root_owned_checkout_gets_no_pod() -> None:
    with pytest.raises(SandboxError, match="never runs as root"):
        session_manifests(SESSION_ID, SandboxImage(DEFAULT_IMAGE), Limits(), checkout=CheckoutCopy(uid=0, gid=0))


# ----------------------------------------------------------------------------- network policies


def rules(policy: Manifest, direction: str) -> list[dict[str, Any]]:
    return list(policy["spec"].get(direction, []))


def public_excepts(rule: dict[str, Any]) -> set[str]:
    blocks = [peer["ipBlock"] for peer in rule["to"]]
    assert {block["cidr"] for block in blocks} == {"0.0.0.0/0", "::/0"}
    return {cidr for block in blocks for cidr in block["except"]}


def test_none_is_deny_all_twice() -> None:
    """The namespace's default denies everything, and the session's own policy isolates its Pod with no rule."""
    objects = generate(limits_of("default", "none"))
    deny = one(objects, "NetworkPolicy", name="cubicle-deny-all")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    own = one(objects, "NetworkPolicy", "sandbox")
    pod = one(objects, "Pod", "sandbox")
    assert own["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert own["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert rules(own, "ingress") == [] and rules(own, "egress") == []
    assert not any(m["kind"] == "Service" or m["metadata"]["name"].startswith("cubicle-proxy") for m in objects)


def test_allow_reaches_only_the_proxy_which_reaches_only_public_addresses_and_listed_ips() -> None:
    objects = generate(limits_of("default", "allow"))
    sandbox, proxy = one(objects, "Pod", "sandbox"), one(objects, "Pod", "proxy")
    (out,) = rules(one(objects, "NetworkPolicy", "sandbox"), "egress")
    assert out["to"] == [{"podSelector": {"matchLabels": {SESSION: SESSION_ID, ROLE: "proxy"}}}]
    assert out["ports"] == [{"protocol": "TCP", "port": PORT}]
    assert out["to"][0]["podSelector"]["matchLabels"].items() <= proxy["metadata"]["labels"].items()
    policy = one(objects, "NetworkPolicy", "proxy")
    (inbound,) = rules(policy, "ingress")
    assert inbound["from"][0]["podSelector"]["matchLabels"].items() <= sandbox["metadata"]["labels"].items()
    dns, public, *literal = rules(policy, "egress")
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert public_excepts(public) == set(SPECIAL)
    assert [p["port"] for p in public["ports"]] == [80, 443, 8080, 9000]
    assert [(r["to"][0]["ipBlock"]["cidr"], [p["port"] for p in r["ports"]]) for r in literal] == [
        ("10.1.2.3/32", [8080]),
        ("2001:db8::1/128", [9000]),
    ]
    service = one(objects, "Service")
    assert service["spec"]["selector"].items() <= proxy["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == PORT


def test_allow_without_hosts_lets_the_proxy_reach_no_port() -> None:
    """An empty port list in a NetworkPolicy means every port; no rule with one is written."""
    objects = generate(Limits(network=NetworkPolicy(level="allow")))
    assert rules(one(objects, "NetworkPolicy", "proxy"), "egress") == [kubernetes._dns_rule(Cluster())]


def test_allow_needs_the_proxy_address() -> None:
    with pytest.raises(ValueError, match="clusterIP"):
        session_manifests(
            SESSION_ID, SandboxImage(DEFAULT_IMAGE), Limits(network=ALLOW), checkout=CheckoutCopy(UID, GID)
        )


def test_the_proxy_pod_is_hardened_as_the_docker_proxy() -> None:
    objects = generate(limits_of("default", "allow"), "runsc")
    proxy = one(objects, "Pod", "proxy")
    box = container(proxy)
    assert box["securityContext"]["runAsUser"] == PROXY_UID and box["securityContext"]["readOnlyRootFilesystem"]
    assert box["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert box["resources"]["limits"]["memory"] == "192Mi" and box["resources"]["limits"]["cpu"] == "1000m"
    assert proxy["spec"]["automountServiceAccountToken"] is False and proxy["spec"]["runtimeClassName"] == "gvisor"
    assert [m["mountPath"] for m in box["volumeMounts"]] == ["/run/squid"]
    assert box["readinessProbe"] == {"tcpSocket": {"port": PORT}, "periodSeconds": 1}
    config = {e["name"]: e["value"] for e in box["env"]}["CUBICLE_SQUID_CONF"]
    assert f"acl cubicle_clients src {Cluster().pod_cidr}" in config and "pypi.org" in config


def test_open_reaches_public_addresses_and_kube_dns_only() -> None:
    (dns, public) = rules(one(generate(limits_of("default", "open")), "NetworkPolicy", "sandbox"), "egress")
    assert dns == kubernetes._dns_rule(Cluster())
    assert public_excepts(public) == set(SPECIAL) and "ports" not in public
    assert {"169.254.0.0/16", "10.0.0.0/8", "fc00::/7"} <= public_excepts(public)  # metadata service, cluster, ULA


# ----------------------------------------------------------------------------- RBAC, accounts, runtime class


def test_the_controller_may_do_exactly_this_in_the_sandbox_namespace_only() -> None:
    objects = kubernetes.cluster_manifests()
    assert not any(m["kind"] in ("ClusterRole", "ClusterRoleBinding") for m in objects)
    role, binding = one(objects, "Role"), one(objects, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == kubernetes.SANDBOX_NAMESPACE
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        *(("", "pods", v) for v in ("create", "get", "list", "watch", "delete")),
        ("", "pods/exec", "create"),
        ("", "pods/exec", "get"),
        ("", "pods/log", "get"),
        *(("", "services", v) for v in ("create", "get", "list", "delete")),
        *(("", "persistentvolumeclaims", v) for v in ("create", "get", "list", "patch", "delete")),
        *(("networking.k8s.io", "networkpolicies", v) for v in ("create", "get", "list", "delete")),
        *(("coordination.k8s.io", "leases", v) for v in ("create", "get", "list", "update", "delete")),
    }
    assert binding["roleRef"] == {"apiGroup": ROLE_GROUP, "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": kubernetes.CONTROLLER_ACCOUNT, "namespace": kubernetes.CONTROLLER_NAMESPACE}
    ]


def test_the_sandboxes_account_has_no_token_and_no_role() -> None:
    objects = kubernetes.cluster_manifests()
    account = one(objects, "ServiceAccount", name=kubernetes.SANDBOX_ACCOUNT)
    assert account["automountServiceAccountToken"] is False
    bound = [s["name"] for m in objects if m["kind"] == "RoleBinding" for s in m["subjects"]]
    assert kubernetes.SANDBOX_ACCOUNT not in bound


def test_the_namespace_enforces_pod_security_restricted() -> None:
    labels = one(kubernetes.cluster_manifests(), "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_gvisor_is_a_runtime_class_with_the_runsc_handler() -> None:
    objects = generate(Limits(), "runsc")
    runtime = one(objects, "RuntimeClass")
    assert runtime["handler"] == "runsc"
    assert one(objects, "Pod", "sandbox")["spec"]["runtimeClassName"] == runtime["metadata"]["name"]


def test_objects_of_a_controller_process_are_owned_by_its_lease() -> None:
    """Deleting a dead controller's Lease lets the garbage collector remove its Pods, Services and policies."""
    owner = Owner("cubicle-host", "0b7c2e1a-1111-4222-8333-944455556666")
    objects = session_manifests(
        SESSION_ID,
        SandboxImage(DEFAULT_IMAGE),
        Limits(network=ALLOW),
        checkout=CheckoutCopy(UID, GID),
        proxy=Proxy(address="10.96.0.20"),
        owner=owner,
    )
    reference = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": owner.name, "uid": owner.uid}]
    for manifest in objects:
        expected = (
            None if manifest["kind"] == "PersistentVolumeClaim" else reference
        )  # the claim lives with the session
        assert manifest["metadata"].get("ownerReferences") == expected, manifest["kind"]


# ----------------------------------------------------------------------------- names and the example writer


def test_names_are_dns_labels_and_tell_ids_apart() -> None:
    names = {kubernetes.proxy_name(i) for i in ("s_ab", "s-ab", "S_AB", "s_" + "f" * 40)}
    assert len(names) == 4 and all(DNS_LABEL.fullmatch(n) and len(n) <= 63 for n in names)
    with pytest.raises(ValueError, match="label value"):
        kubernetes.session_labels("s_" + "x" * 70)


def test_the_example_writer_emits_json_that_is_yaml_and_valid(tmp_path: Path) -> None:
    limits = '{"network": "allow=pypi.org", "memory_mb": 1024}'
    assert kubernetes.main(["--out", str(tmp_path), "--limits", limits, "--runtime", "runsc"]) == 0
    files = sorted(tmp_path.glob("*.json"))
    kinds = [json.loads(path.read_text())["kind"] for path in files]
    assert kinds[0] == "Namespace" and kinds.count("Pod") == 2 and "Service" in kinds
    for path in files:
        manifest = json.loads(path.read_text())
        assert yaml.safe_load(path.read_text()) == manifest
        kubernetes_validate.validate(manifest, VERSIONS[-1], strict=True)
