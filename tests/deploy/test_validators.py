"""The files under ci/ pass real validators, and the manifests are what a hardened cluster accepts.

- every Kubernetes object: the API's own OpenAPI schemas, strict (unknown fields refused), with
  `kubernetes-validate` for the oldest and newest Kubernetes versions it knows here;
- every pod template (ci/k8s/, ci/k8s/irsa/, ci/k8s/vllm/): Pod Security Standards "restricted" (the controls of the
  Kubernetes docs, checked below; each check is shown to catch its violation), plus our own: a read-only root
  filesystem with an emptyDir at /tmp;
- ci/k8s/irsa/: the same objects as ci/k8s/ but for credentials (an IAM role, no keys);
- each warm Job lands on its servers' GPU type; the tool image is pinned and the same everywhere in ci/k8s/ and
  ci/k8s/irsa/ (ci/k8s/vllm/ runs its own image: tests/deploy/test_deploy_files.py);
- ci/Dockerfile and ci/Dockerfile.vllm: `hadolint` (pinned base and apt versions);
- ci/github/warm-cache.yml: GitHub's workflow schema (`check-jsonschema`, SchemaStore's schema vendored there).

The validators come with the test extras (pyproject.toml); missing ones skip locally and fail under CI=true.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "ci" / "k8s"
IRSA = K8S / "irsa"
VLLM = K8S / "vllm"
MANIFESTS = sorted(p for d in (K8S, IRSA, VLLM) for p in d.glob("*.yaml") if p.name != "kustomization.yaml")
KUSTOMIZATIONS = [K8S / "kustomization.yaml", IRSA / "kustomization.yaml"]
KUBE_VERSIONS = ("1.29.0", "1.37.0")  # an old cluster still common, and the newest schemas here


def _need(what: str):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is missing: install the test extras (pip install -e '.[test]')", pytrace=False)
    pytest.skip(f"{what} is missing: pip install -e '.[test]'")


def _tool(name: str) -> str:
    """A validator's executable: next to this Python (the venv's bin) first, then PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        _need(name)
    return found


def _kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError:
        _need("kubernetes-validate")
    return kubernetes_validate


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _objects() -> list[tuple[str, dict]]:
    return [(f"{p.relative_to(ROOT)}:{d['kind']}/{d['metadata']['name']}", d) for p in MANIFESTS for d in _docs(p)]


def _pod_specs() -> list[tuple[str, dict]]:
    return [(where, d["spec"]["template"]["spec"]) for where, d in _objects() if d["kind"] in ("Deployment", "Job")]


def test_the_vllm_pods_are_among_those_checked():
    assert {w.split(":")[0] for w, _ in _pod_specs()} >= {"ci/k8s/vllm/deployment.yaml", "ci/k8s/vllm/warm-job.yaml"}


def _containers(pod: dict) -> list[dict]:
    return list(pod.get("initContainers") or []) + list(pod.get("containers") or [])


# ------------------------------------------------------------------------------------------ Kubernetes schemas


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_every_manifest_passes_the_kubernetes_schemas_strictly(version):
    kv = _kubernetes_validate()
    objs = _objects()
    assert {d["kind"] for _, d in objs} >= {"Deployment", "Job", "ServiceAccount"}
    for where, doc in objs:
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as exc:  # pragma: no cover - the failure message
            pytest.fail(f"{where} fails Kubernetes {version}: {exc}")


def test_the_schema_validation_catches_a_misspelt_field():
    kv = _kubernetes_validate()
    _, dep = next((w, d) for w, d in _objects() if d["kind"] == "Deployment")
    bad = copy.deepcopy(dep)
    bad["spec"]["template"]["spec"]["initContainers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, KUBE_VERSIONS[-1], strict=True)


# ------------------------------------------------------------------------------------------ Pod Security


RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod: dict) -> list[str]:
    """What Pod Security Standards "restricted" (which includes "baseline") refuses in a pod spec."""
    out = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            out.append(f"{flag} is set")
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']} is of a type restricted refuses: {sorted(kinds - RESTRICTED_VOLUMES)}")
    psc = pod.get("securityContext") or {}
    for s in psc.get("sysctls") or []:
        out.append(f"pod sets sysctl {s.get('name')}")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    for c in _containers(pod):
        n, sc = c["name"], c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{n}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{n}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{n}: capabilities.drop lacks ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{n}: adds capabilities {caps['add']}")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{n}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{n}: runs as uid 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{n}: seccompProfile is {seccomp!r}, not RuntimeDefault or Localhost")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{n}: procMount {sc['procMount']}")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{n}: hostPort {p['hostPort']}")
        se = sc.get("seLinuxOptions") or {}
        if se.get("user") or se.get("role"):
            out.append(f"{n}: seLinuxOptions user/role")
    return out


@pytest.mark.parametrize("where,pod", _pod_specs(), ids=[w for w, _ in _pod_specs()])
def test_every_pod_passes_pod_security_restricted(where, pod):
    assert restricted_violations(pod) == [], where


def _break(pod: dict, how: str) -> dict:
    bad = copy.deepcopy(pod)
    c = _containers(bad)[0]
    sc = c.setdefault("securityContext", {})
    if how == "escalation":
        sc["allowPrivilegeEscalation"] = True
    elif how == "capabilities":
        sc["capabilities"] = {"drop": ["NET_RAW"]}
    elif how == "root":
        sc["runAsNonRoot"] = False
    elif how == "seccomp":
        sc["seccompProfile"] = {"type": "Unconfined"}
    elif how == "hostpath":
        bad["volumes"].append({"name": "host", "hostPath": {"path": "/var"}})
    elif how == "privileged":
        sc["privileged"] = True
    return bad


@pytest.mark.parametrize("how", ["escalation", "capabilities", "root", "seccomp", "hostpath", "privileged"])
def test_the_restricted_check_catches_each_violation(how):
    _, pod = _pod_specs()[0]
    assert restricted_violations(_break(pod, how)), how


@pytest.mark.parametrize("where,pod", _pod_specs(), ids=[w for w, _ in _pod_specs()])
def test_root_filesystem_is_read_only_with_an_emptydir_tmp(where, pod):
    vols = {v["name"]: v for v in pod["volumes"]}
    for c in _containers(pod):
        assert c["securityContext"].get("readOnlyRootFilesystem") is True, f"{where}: {c['name']}"
        tmp = [m for m in c.get("volumeMounts") or [] if m["mountPath"] == "/tmp"]
        assert len(tmp) == 1 and "emptyDir" in vols[tmp[0]["name"]], f"{where}: {c['name']} has no emptyDir /tmp"
        assert not tmp[0].get("readOnly")


# ------------------------------------------------------------------------------------------ IRSA variant


STATIC_KEYS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"}


def _without_credentials(doc: dict) -> dict:
    d = copy.deepcopy(doc)
    pod = d["spec"]["template"]["spec"]
    pod.pop("serviceAccountName", None)
    for c in _containers(pod):
        c["env"] = [e for e in c.get("env") or [] if e["name"] not in STATIC_KEYS | {"AWS_REGION"}]
    return d


@pytest.mark.parametrize("name", ["deployment.yaml", "warm-job.yaml"])
def test_irsa_variant_differs_only_in_credentials(name):
    (static,), (irsa,) = _docs(K8S / name), _docs(IRSA / name)
    assert _without_credentials(static) == _without_credentials(irsa), f"ci/k8s/irsa/{name} drifted from ci/k8s/{name}"
    pod = irsa["spec"]["template"]["spec"]
    accounts = {d["metadata"]["name"]: d for d in _docs(IRSA / "serviceaccounts.yaml")}
    sa = accounts[pod["serviceAccountName"]]
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    for c in _containers(pod):
        names = {e["name"] for e in c.get("env") or []}
        assert not names & STATIC_KEYS, f"{name}: {c['name']} still reads static keys"
        assert not any("secretKeyRef" in str(e) and "s3-credentials" in str(e) for e in c.get("env") or [])


def test_kustomizations_list_what_exists_and_pin_one_tag():
    tags = set()
    for k in KUSTOMIZATIONS:
        (doc,) = _docs(k)
        for r in doc["resources"]:
            assert (k.parent / r).is_file(), f"{k}: {r} does not exist"
        tags |= {img["newTag"] for img in doc["images"]}
    images = {
        c["image"]
        for where, pod in _pod_specs()
        if not where.startswith(f"{VLLM.relative_to(ROOT)}/")
        for c in _containers(pod)
    }
    assert len(images) == 1, f"every container runs the one tool image: {images}"
    (image,) = images
    repo, _, tag = image.rpartition(":")
    assert tag and tag != "latest" and "/" not in tag, f"image {image} is not pinned to a tag"
    assert tags == {tag}, f"kustomizations pin {tags}, manifests say {tag}"


# ------------------------------------------------------------------------------------------ GPU scheduling


@pytest.mark.parametrize("folder", [K8S, IRSA, VLLM], ids=lambda p: str(p.relative_to(ROOT)))
def test_warm_job_is_scheduled_on_the_servers_gpu_type(folder):
    objs = [d for p in sorted(folder.glob("*.yaml")) for d in _docs(p)]
    (job,) = [d for d in objs if d["kind"] == "Job"]
    (dep,) = [d for d in objs if d["kind"] == "Deployment"]
    jpod, dpod = job["spec"]["template"]["spec"], dep["spec"]["template"]["spec"]
    selector = jpod.get("nodeSelector") or {}
    assert any(k.startswith("nvidia.com/gpu") for k in selector), f"no GPU nodeSelector: {selector}"
    assert selector == dpod.get("nodeSelector"), "the Job warms on another GPU type than the servers run on"
    for pod in (jpod, dpod):
        tol = pod.get("tolerations") or []
        assert any(t.get("key") == "nvidia.com/gpu" and t.get("effect") in (None, "NoSchedule") for t in tol), tol
    assert int(jpod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) == 1


# ------------------------------------------------------------------------------------------ Dockerfile, workflow


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.vllm"])
def test_hadolint_passes_the_dockerfile(name):
    r = subprocess.run([_tool("hadolint"), str(ROOT / "ci" / name)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_catches_an_unpinned_apt_package(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM debian:12.8\nRUN apt-get update && apt-get install -y --no-install-recommends g++ "
        "&& rm -rf /var/lib/apt/lists/*\n"
    )
    r = subprocess.run([_tool("hadolint"), str(bad)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "DL3008" in r.stdout, r.stdout + r.stderr


def _check_jsonschema(*args: str) -> subprocess.CompletedProcess:
    try:
        import check_jsonschema  # noqa: F401
    except ImportError:
        _need("check-jsonschema")
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", *args], capture_output=True, text=True, timeout=120
    )


def test_workflow_passes_githubs_workflow_schema():
    wf = str(ROOT / "ci" / "github" / "warm-cache.yml")
    for schema in ("vendor.github-workflows", "custom.github-workflows-require-timeout"):
        r = _check_jsonschema("--builtin-schema", schema, wf)
        assert r.returncode == 0, r.stdout + r.stderr


def test_the_workflow_schema_catches_a_bad_key(tmp_path):
    bad = tmp_path / "wf.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: x\n    timeout-minutes: 5\n    stepz: []\n")
    r = _check_jsonschema("--builtin-schema", "vendor.github-workflows", str(bad))
    assert r.returncode != 0, r.stdout
