"""The deployment files under ci/ parse and hold what they must.

- ci/Dockerfile: python:3.11.x-slim-bookworm (pinned), torch from a build-arg index before `pip install .`,
  non-root, /cache volume, ENTRYPOINT ["cachetool"].
- ci/k8s/deployment.yaml: an initContainer running `cachetool pull` into a volume that the server container
  mounts at the same path, with CACHETOOL_CACHE_ROOT set to it; the trusted key and AWS credentials wired in.
- ci/k8s/warm-job.yaml: a Job running `cachetool warm --push ... --sign-key <file from a Secret>`.
- ci/github/warm-cache.yml: on push to main, on a GPU runner, in the servers' image, a pinned cachetool
  installed (never the serving repo), `cachetool warm --push ... --sign-key`.
- Every `cachetool <subcommand>` and `--flag` used in these files exists in the CLI (`cachetool <cmd> --help`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "ci"
DOCKERFILE = CI / "Dockerfile"
DEPLOYMENT = CI / "k8s" / "deployment.yaml"
WARM_JOB = CI / "k8s" / "warm-job.yaml"
KUSTOMIZATION = CI / "k8s" / "kustomization.yaml"
WORKFLOW = CI / "github" / "warm-cache.yml"
TOOL_IMAGE_REPO = "ghcr.io/example/cachetool"


# ----------------------------------------------------------------------------------------------- helpers


def _load_all(path: Path) -> list:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} holds no YAML document"
    return docs


def _one(path: Path, kind: str) -> dict:
    objs = [d for d in _load_all(path) if isinstance(d, dict) and d.get("kind") == kind]
    assert len(objs) == 1, f"{path}: expected exactly one {kind}, found {len(objs)}"
    return objs[0]


def _argv(container: dict) -> list[str]:
    """The full argv a container runs (command + args); every item must be a string, as Kubernetes requires."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    for item in argv:
        assert isinstance(item, str), f"container {container['name']}: non-string argv item {item!r}"
    return argv


def _flag_value(argv: list[str], flag: str) -> str:
    """The value of `--flag VALUE` or `--flag=VALUE`; fails if absent or given twice."""
    values = []
    for i, tok in enumerate(argv):
        if tok == flag:
            assert i + 1 < len(argv), f"{flag} has no value in {argv}"
            values.append(argv[i + 1])
        elif tok.startswith(flag + "="):
            values.append(tok.split("=", 1)[1])
    assert len(values) == 1, f"expected {flag} once in {argv}, found {len(values)}"
    return values[0]


def _positionals(argv: list[str], start: int, value_flags: set[str]) -> list[str]:
    out, i = [], start
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("-"):
            i += 2 if (tok in value_flags and "=" not in tok) else 1
            continue
        out.append(tok)
        i += 1
    return out


def _mount_for(container: dict, path: str) -> dict:
    """The volumeMount whose mountPath is `path` or a parent of it."""
    best = None
    for m in container.get("volumeMounts") or []:
        mp = PurePosixPath(m["mountPath"])
        if PurePosixPath(path) == mp or mp in PurePosixPath(path).parents:
            if best is None or len(str(mp)) > len(best["mountPath"]):
                best = m
    assert best is not None, f"container {container['name']}: nothing mounted at {path}"
    return best


def _volume(pod_spec: dict, name: str) -> dict:
    vols = [v for v in pod_spec.get("volumes") or [] if v["name"] == name]
    assert len(vols) == 1, f"volume {name!r} defined {len(vols)} times"
    return vols[0]


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env") or []}


def _is_tool_image(image: str) -> bool:
    return image.split("@")[0].rsplit(":", 1)[0] == TOOL_IMAGE_REPO


def _workflow_on(wf: dict) -> dict:
    # YAML 1.1 (PyYAML) reads an unquoted `on:` key as the boolean True.
    on = wf.get("on", wf.get(True))
    assert isinstance(on, dict), f"workflow trigger block is {on!r}"
    return on


def _shell_commands(script: str) -> list[list[str]]:
    """Split a shell script into simple commands (tokens), joining backslash-continued lines."""
    script = re.sub(r"\\\n", " ", script)
    commands: list[list[str]] = []
    for line in script.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        current: list[str] = []
        skip_next = False
        for tok in lex:
            if skip_next:  # the target of a redirection
                skip_next = False
                continue
            if tok in {";", "&&", "||", "|", "&"}:
                if current:
                    commands.append(current)
                current = []
            elif tok in {">", ">>", "<", "2>", "&>"}:
                skip_next = True
            else:
                current.append(tok)
        if current:
            commands.append(current)
    return commands


def _workflow_steps(wf: dict) -> list[dict]:
    return [s for job in wf["jobs"].values() for s in job.get("steps", [])]


def _cachetool_argvs() -> list[tuple[str, list[str]]]:
    """Every cachetool invocation in the ci/ files: (where, argv starting with 'cachetool')."""
    found: list[tuple[str, list[str]]] = []
    for path in (DEPLOYMENT, WARM_JOB):
        for doc in _load_all(path):
            spec = doc["spec"]["template"]["spec"]
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                argv = _argv(c)
                if argv and argv[0] == "cachetool":
                    found.append((f"{path.name}:{c['name']}", argv))
    for step in _workflow_steps(yaml.safe_load(WORKFLOW.read_text())):
        for cmd in _shell_commands(step.get("run", "")):
            if cmd and cmd[0] == "cachetool":
                found.append((f"{WORKFLOW.name}:{step.get('name', '?')}", cmd))
    return found


def _only(argvs: list[tuple[str, list[str]]], sub: str) -> list[str]:
    matches = [a for _, a in argvs if len(a) > 1 and a[1] == sub]
    assert len(matches) == 1, f"expected one `cachetool {sub}`, found {len(matches)}"
    return matches[0]


# ----------------------------------------------------------------------------------------------- Dockerfile


def _dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with comments dropped and continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        if full:
            instr, _, args = full.partition(" ")
            out.append((instr.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def _dockerfile_base(ins: list[tuple[str, str]]) -> str:
    """The image of the (single) FROM, with the build arguments declared before it at their defaults."""
    names = [i for i, _ in ins]
    froms = [a for i, a in ins if i == "FROM"]
    assert len(froms) == 1, froms
    base_args = dict(a.split("=", 1) for i, a in ins[: names.index("FROM")] if i == "ARG" and "=" in a)
    return re.sub(r"\$\{(\w+)\}", lambda m: base_args.get(m.group(1), m.group(0)), froms[0].split()[0])


def test_dockerfile_structure():
    ins = _dockerfile_instructions()
    names = [i for i, _ in ins]
    known = {
        "FROM",
        "ARG",
        "ENV",
        "RUN",
        "COPY",
        "ADD",
        "WORKDIR",
        "USER",
        "VOLUME",
        "ENTRYPOINT",
        "CMD",
        "LABEL",
        "EXPOSE",
        "SHELL",
        "STOPSIGNAL",
        "HEALTHCHECK",
        "ONBUILD",
    }
    assert set(names) <= known, f"unknown instructions: {set(names) - known}"

    # the base is a build argument whose default is the pinned official image
    base = _dockerfile_base(ins)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base

    args = {a.split("=", 1)[0] for i, a in ins if i == "ARG"}
    assert {"TORCH_INDEX_URL", "TORCH_VERSION"} <= args

    runs = [(n, a) for n, (i, a) in enumerate(ins) if i == "RUN"]
    torch_runs = [
        n for n, a in runs if "pip install" in a and "TORCH_INDEX_URL" in a and "TORCH_VERSION" in a and "torch" in a
    ]
    project_runs = [n for n, a in runs if re.search(r"pip install (\S+ )*\.(\s|$)", a)]
    assert torch_runs, "no RUN installs torch from ${TORCH_INDEX_URL} at ${TORCH_VERSION}"
    assert project_runs, "no RUN does `pip install .`"
    assert torch_runs[0] < project_runs[0], "torch must be installed before the project"
    # the project sources are copied in before `pip install .`
    copies = " ".join(a for n, (i, a) in enumerate(ins) if i in {"COPY", "ADD"} and n < project_runs[0])
    for needed in ("pyproject.toml", "cachetool", "compiler"):
        assert needed in copies, f"{needed} is not copied before `pip install .`"

    users = [a for i, a in ins if i == "USER"]
    assert users, "no USER: the image would run as root"
    last_user = users[-1].split(":")[0]
    assert last_user not in {"root", "0"}
    assert names.index("USER") > max(n for n, _ in runs), "a RUN after USER would fail or run as the user"

    volumes = [a for i, a in ins if i == "VOLUME"]
    vol_paths = set()
    for v in volumes:
        vol_paths.update(json.loads(v) if v.startswith("[") else v.split())
    assert "/cache" in vol_paths

    envs = " ".join(a for i, a in ins if i == "ENV")
    assert re.search(r"CACHETOOL_CACHE_ROOT=/cache\b", envs)

    entry = [a for i, a in ins if i == "ENTRYPOINT"]
    assert len(entry) == 1 and json.loads(entry[0]) == ["cachetool"], 'ENTRYPOINT must be exec-form ["cachetool"]'


# ----------------------------------------------------------------------------------------------- Deployment


PULL_VALUE_FLAGS = {
    "--cache-root",
    "--timeout",
    "--on-miss",
    "--trust",
    "--device",
    "--ranks",
    "--workers",
    "--profile",
    "--endpoint-url",
}


def test_deployment_init_container_pulls_into_the_shared_volume():
    dep = _one(DEPLOYMENT, "Deployment")
    assert dep["apiVersion"] == "apps/v1"
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items(), "selector does not match the pod labels"

    inits = pod.get("initContainers") or []
    assert len(inits) == 1
    init = inits[0]
    assert _is_tool_image(init["image"]), init["image"]

    argv = _argv(init)
    assert argv[:2] == ["cachetool", "pull"]
    refs = _positionals(argv, 2, PULL_VALUE_FLAGS)
    assert len(refs) == 1 and re.match(r"^(s3|oci|file)://.+:[\w.-]+$", refs[0]), refs
    assert _flag_value(argv, "--timeout") == "300"
    assert _flag_value(argv, "--on-miss") == "continue"

    # --cache-root is the mount path of an emptyDir volume named compile-cache
    cache_root = _flag_value(argv, "--cache-root")
    mount = _mount_for(init, cache_root)
    assert mount["mountPath"] == cache_root == "/cache"
    assert mount["name"] == "compile-cache"
    assert not mount.get("readOnly")
    assert "emptyDir" in _volume(pod, "compile-cache")

    # --trust names a file mounted from a ConfigMap or Secret
    trust = _flag_value(argv, "--trust")
    key_mount = _mount_for(init, trust)
    key_vol = _volume(pod, key_mount["name"])
    assert "configMap" in key_vol or "secret" in key_vol
    source = key_vol.get("configMap") or key_vol.get("secret")
    rel = str(PurePosixPath(trust).relative_to(key_mount["mountPath"]))
    if source.get("items"):
        assert rel in {it["path"] for it in source["items"]}, f"{trust} is not projected by volume {key_vol}"

    # AWS credentials from a Secret; the endpoint optional
    env = _env(init)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert name in env, f"init-container lacks {name}"
        assert "secretKeyRef" in env[name].get("valueFrom", {}), f"{name} must come from a Secret"
        assert "value" not in env[name], f"{name} must not be inlined"
    if "AWS_ENDPOINT_URL" in env:
        ref = env["AWS_ENDPOINT_URL"]["valueFrom"]["secretKeyRef"]
        assert ref.get("optional") is True


def test_deployment_server_uses_the_same_cache_root():
    dep = _one(DEPLOYMENT, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    init = pod["initContainers"][0]
    cache_root = _flag_value(_argv(init), "--cache-root")
    init_mount = _mount_for(init, cache_root)

    servers = [c for c in pod["containers"] if c["name"] == "server"]
    assert len(servers) == 1
    server = servers[0]
    server_mounts = [m for m in server.get("volumeMounts") or [] if m["name"] == init_mount["name"]]
    assert len(server_mounts) == 1, "server does not mount the init-container's cache volume"
    assert server_mounts[0]["mountPath"] == init_mount["mountPath"]
    env = _env(server)
    assert env.get("CACHETOOL_CACHE_ROOT", {}).get("value") == cache_root
    assert int(server["resources"]["limits"]["nvidia.com/gpu"]) == 1

    # the demo server command, when it is cachetool, points at the same root
    argv = _argv(server)
    if argv and argv[0] == "cachetool" and "--cache-root" in " ".join(argv):
        assert _flag_value(argv, "--cache-root") == cache_root
    # pull preflights against the device the server runs on
    pull_argv = _argv(init)
    if argv and argv[0] == "cachetool" and "--device" in pull_argv and "--device" in argv:
        assert _flag_value(pull_argv, "--device") == _flag_value(argv, "--device")

    # the pod runs as the image's non-root user
    sc = pod.get("securityContext") or {}
    assert sc.get("runAsNonRoot") is True


# ----------------------------------------------------------------------------------------------- Job


def test_warm_job_warms_pushes_and_signs_with_a_secret_key():
    job = _one(WARM_JOB, "Job")
    assert job["apiVersion"] == "batch/v1"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in {"Never", "OnFailure"}
    containers = pod["containers"]
    assert len(containers) == 1
    c = containers[0]
    assert _is_tool_image(c["image"]), c["image"]

    argv = _argv(c)
    assert argv[:2] == ["cachetool", "warm"]
    assert _flag_value(argv, "--model") == "llama-3.2-1b"
    assert _flag_value(argv, "--device") == "cuda"
    push = _flag_value(argv, "--push")
    assert re.match(r"^(s3|oci|file)://.+:[\w.-]+$", push), push

    cache_root = _flag_value(argv, "--cache-root")
    assert "emptyDir" in _volume(pod, _mount_for(c, cache_root)["name"]) or "persistentVolumeClaim" in _volume(
        pod, _mount_for(c, cache_root)["name"]
    )

    key = _flag_value(argv, "--sign-key")
    key_mount = _mount_for(c, key)
    assert key_mount.get("readOnly") is True
    vol = _volume(pod, key_mount["name"])
    assert "secret" in vol, "the signing key must come from a Secret"
    rel = str(PurePosixPath(key).relative_to(key_mount["mountPath"]))
    items = vol["secret"].get("items")
    if items:
        assert rel in {it["path"] for it in items}, f"{key} is not projected by the secret volume"
    mode = vol["secret"].get("defaultMode")
    if mode is not None:
        assert mode & 0o007 == 0, "the signing key must not be world-readable"

    env = _env(c)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert "secretKeyRef" in env[name]["valueFrom"]
    assert int(c["resources"]["limits"]["nvidia.com/gpu"]) == 1


def test_job_pushes_the_ref_the_deployment_pulls():
    pull = _only(_cachetool_argvs(), "pull")
    warm_job = _argv(_one(WARM_JOB, "Job")["spec"]["template"]["spec"]["containers"][0])
    assert _positionals(pull, 2, PULL_VALUE_FLAGS) == [_flag_value(warm_job, "--push")]
    # and both run the same tool image
    dep_img = _one(DEPLOYMENT, "Deployment")["spec"]["template"]["spec"]["initContainers"][0]["image"]
    job_img = _one(WARM_JOB, "Job")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert dep_img == job_img


def test_kustomization_lists_existing_resources():
    k = _one(KUSTOMIZATION, "Kustomization")
    resources = k["resources"]
    assert {"deployment.yaml", "warm-job.yaml"} <= set(resources)
    for r in resources:
        assert (KUSTOMIZATION.parent / r).is_file(), r
    for img in k.get("images") or []:
        assert img["name"] == TOOL_IMAGE_REPO


# ----------------------------------------------------------------------------------------------- workflow


def test_workflow_warms_on_gpu_and_pushes_on_merge():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = _workflow_on(wf)
    assert "main" in on["push"]["branches"]
    assert "pull_request" not in on, "secrets (signing key) must not be exposed to pull requests"

    jobs = wf["jobs"]
    assert len(jobs) == 1
    job = next(iter(jobs.values()))
    runs_on = job["runs-on"]
    runs_on = [runs_on] if isinstance(runs_on, str) else runs_on
    assert "self-hosted" in runs_on and "gpu" in runs_on

    # it runs in the servers' image (a pinned tool image), not on the runner's own Python
    container = job.get("container") or {}
    image = container.get("image", "") if isinstance(container, dict) else container
    default_image = re.findall(r"'([^']+)'", image) or [image]
    assert _is_tool_image(default_image[-1]) and not default_image[-1].endswith(":latest"), image
    dep_img = _one(DEPLOYMENT, "Deployment")["spec"]["template"]["spec"]["initContainers"][0]["image"]
    assert default_image[-1] == dep_img, "the workflow warms in another image than the servers run"

    steps = job["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert "actions/checkout" in uses
    assert "actions/upload-artifact" in uses
    assert "actions/setup-python" not in uses, "a runner Python would not have the servers' torch build"

    warm_steps = [
        (n, cmd)
        for n, s in enumerate(steps)
        for cmd in _shell_commands(s.get("run", ""))
        if cmd[:2] == ["cachetool", "warm"]
    ]
    assert len(warm_steps) == 1
    n_warm, warm = warm_steps[0]
    # --push names a store ref, directly or through a workflow env variable whose default is one; that default
    # is the ref the Deployment pulls
    push = _flag_value(warm, "--push")
    var = re.fullmatch(r"\$\{?(\w+)\}?", push)
    if var:
        push = wf.get("env", {}).get(var.group(1), "")
    refs = re.findall(r"(?:s3|oci|file)://[^'\s}]+:[\w.-]+", push)
    assert refs, f"--push {push!r} is not a store ref"
    pull = _only(_cachetool_argvs(), "pull")
    assert refs[-1] in _positionals(pull, 2, PULL_VALUE_FLAGS), "the workflow pushes a ref the Deployment does not pull"
    assert _flag_value(warm, "--device") == "cuda"
    assert "--json" in warm

    # cachetool itself is installed (pinned), never `pip install .` (that would be the serving repo)
    install = [(n, s["run"]) for n, s in enumerate(steps) if "pip install" in s.get("run", "")]
    assert install and n_warm > install[0][0]
    script = install[0][1]
    assert not re.search(r"pip install (\S+ )*\.(\s|$)", script), "`pip install .` installs the serving repo"
    spec = wf["env"]["CACHETOOL_PIP_SPEC"]
    assert "$CACHETOOL_PIP_SPEC" in script and re.search(r"cachetool( @ \S+@v?[\d.]+|==[\d.]+)", spec), spec

    # the signing key comes from secrets, is written to a file, and that file is what --sign-key names
    sign_key = _flag_value(warm, "--sign-key")
    key_steps = [
        s
        for s in steps[:n_warm]
        if "secrets." in json.dumps(s.get("env", {})) and sign_key.strip('"') in s.get("run", "").replace('"', "")
    ]
    assert key_steps, f"no step writes {sign_key} from a secret before the warm step"

    # AWS credentials: either the configure-aws-credentials action or secrets in env
    aws_action = [s for s in steps[:n_warm] if s.get("uses", "").startswith("aws-actions/configure-aws-credentials")]
    warm_env = json.dumps(steps[n_warm].get("env", {}))
    assert aws_action or ("secrets.AWS_ACCESS_KEY_ID" in warm_env and "secrets.AWS_SECRET_ACCESS_KEY" in warm_env)

    # the --json summary is uploaded as an artifact, even when the warm failed
    upload = [s for s in steps[n_warm:] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload and upload[0].get("if") == "always()"
    redirect = re.search(r"--json\s*>\s*(\S+)", steps[n_warm]["run"])
    assert redirect, "the --json summary is not written to a file"
    assert upload[0]["with"]["path"] == redirect.group(1)


# ----------------------------------------------------------------------------------------------- CLI


@functools.cache
def _help(sub: str | None) -> subprocess.CompletedProcess:
    """`cachetool [sub] --help` from this checkout (sub=None: the group's own options)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    argv = [sys.executable, "-m", "cachetool"] + ([sub] if sub else []) + ["--help"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _help_options(text: str) -> dict[str, str]:
    """Option name → its definition in click's help (names and metavar, e.g. `--on-miss [fail|continue]`).

    Only lines indented as click indents option definitions count, so wrapped help text that happens to start
    with a flag is not mistaken for one."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^ {1,4}(-\S.*)$", line)
        if not m:
            continue
        spec = re.split(r"\s{2,}", m.group(1).strip(), maxsplit=1)[0]
        for name in re.findall(r"(?:^|[\s,/])(--?[A-Za-z0-9][\w.-]*)", spec):
            options[name] = spec
    return options


def test_every_cachetool_command_and_flag_in_ci_exists():
    argvs = _cachetool_argvs()
    subs = {a[1] for _, a in argvs if len(a) > 1}
    assert {"pull", "warm"} <= subs, subs  # the parser found the commands at all

    problems = []
    for where, argv in argvs:
        # `cachetool --version` style calls use the group's options; otherwise argv[1] is the subcommand.
        sub = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None
        first = 2 if sub else 1
        res = _help(sub)
        if res.returncode != 0:
            problems.append(
                f"{where}: `cachetool {sub}` is not a command ({(res.stderr or res.stdout).strip()[-200:]})"
            )
            continue
        options = _help_options(res.stdout)
        for i, tok in enumerate(argv[first:], start=first):
            if not tok.startswith("-") or tok == "-":
                continue
            flag, eq, inline = tok.partition("=")
            if flag not in options:
                problems.append(f"{where}: `cachetool {sub or ''}` has no option {flag}")
                continue
            choices = re.search(r"\[([\w-]+(?:\|[\w-]+)+)\]", options[flag])
            if choices:
                value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
                if value not in choices.group(1).split("|"):
                    problems.append(f"{where}: {flag} {value!r} is not one of {choices.group(1)}")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------- vLLM

VLLM_DEPLOYMENT = CI / "k8s" / "vllm" / "deployment.yaml"
VLLM_WARM_JOB = CI / "k8s" / "vllm" / "warm-job.yaml"


def _split_at_dashes(argv: list[str]) -> tuple[list[str], list[str]]:
    return (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])


def test_vllm_deployment_pulls_the_key_its_server_will_use():
    """The init-container's model path, vLLM flags and cache root are the server's own: vLLM hashes the model
    path and the flags, so a pull that asked for another would check (and install) the wrong key."""
    spec = _one(VLLM_DEPLOYMENT, "Deployment")["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    (server,) = spec["containers"]
    pull, pull_flags = _split_at_dashes(_argv(init))
    assert pull[:2] == ["cachetool", "pull"] and _flag_value(pull, "--engine") == "vllm"
    serve = _argv(server)
    assert serve[:2] == ["vllm", "serve"]
    model, serve_flags = serve[2], serve[3:]
    assert pull_flags == serve[2:], (pull_flags, serve[2:])  # the server's command line verbatim
    root = _flag_value(pull, "--cache-root")
    env = {e["name"]: e.get("value") for e in server.get("env", [])}
    init_env = {e["name"]: e.get("value") for e in init.get("env", [])}
    assert env["VLLM_CACHE_ROOT"] == root
    # vLLM's Triton kernels: read by the server where the bundle's triton_cache/ is installed
    assert env["TRITON_CACHE_DIR"] == init_env["TRITON_CACHE_DIR"] == f"{root}/triton_cache"
    mounts = {c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (init, server)}
    assert mounts[init["name"]][root] == mounts[server["name"]][root]
    assert _flag_value(pull, "--on-miss") == "continue" and _flag_value(pull, "--trust")

    job = _one(VLLM_WARM_JOB, "Job")["spec"]["template"]["spec"]
    warm, warm_flags = _split_at_dashes(_argv(job["containers"][0]))
    assert warm[:2] == ["cachetool", "warm"] and _flag_value(warm, "--engine") == "vllm"
    assert _flag_value(warm, "--model") == model
    assert warm_flags == [f for f in serve_flags if f not in ("--port", "8000")]  # the API port is not in the key
    assert _flag_value(warm, "--push") == pull[2]


def test_every_cachetool_flag_in_the_vllm_files_exists():
    problems = []
    for path in (VLLM_DEPLOYMENT, VLLM_WARM_JOB):
        for doc in _load_all(path):
            spec = doc["spec"]["template"]["spec"]
            for c in (spec.get("initContainers") or []) + spec["containers"]:
                argv, _vllm_flags = _split_at_dashes(_argv(c))
                if argv[0] != "cachetool":
                    continue
                options = _help_options(_help(argv[1]).stdout)
                problems += [
                    f"{path.name}: cachetool {argv[1]} has no option {t}"
                    for t in argv[2:]
                    if t.startswith("-") and t.partition("=")[0] not in options
                ]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------- vLLM image

VLLM_DOCKERFILE = CI / "Dockerfile.vllm"
VLLM_IMAGE_REPO = "ghcr.io/example/vllm-cachetool"
PIP_VALUE_OPTIONS = {
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
}


def _vllm_pods() -> list[tuple[str, dict]]:
    return [
        (VLLM_DEPLOYMENT.name, _one(VLLM_DEPLOYMENT, "Deployment")["spec"]["template"]["spec"]),
        (VLLM_WARM_JOB.name, _one(VLLM_WARM_JOB, "Job")["spec"]["template"]["spec"]),
    ]


def _vllm_containers() -> list[tuple[str, dict, dict]]:
    return [
        (f"{where}:{c['name']}", pod, c)
        for where, pod in _vllm_pods()
        for c in (pod.get("initContainers") or []) + pod["containers"]
    ]


def _pip_installs(ins: list[tuple[str, str]]) -> list[list[str]]:
    """The arguments after `install` of every `pip install` / `python3 -m pip install` in the RUN instructions."""
    out = []
    for instr, args in ins:
        if instr != "RUN":
            continue
        for cmd in _shell_commands(args):
            while cmd and re.fullmatch(r"[A-Za-z_]\w*=.*", cmd[0]):  # leading VAR=value assignments
                cmd = cmd[1:]
            if "pip" in cmd and "install" in cmd[cmd.index("pip") :]:
                out.append(cmd[cmd.index("install", cmd.index("pip")) + 1 :])
    return out


def _pip_targets(args: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(args):
        if args[i] in PIP_VALUE_OPTIONS:
            i += 2
            continue
        if not args[i].startswith("-"):
            out.append(args[i])
        i += 1
    return out


def test_vllm_dockerfile_adds_cachetool_to_the_tested_vllm_image_and_keeps_its_torch():
    """ci/Dockerfile.vllm: FROM vLLM's CUDA image of the last tested GPU release; the project with --no-deps, then
    exactly pyproject's dependencies but torch, constrained (so pip can add, never replace, a package of the base);
    a non-root USER after every RUN; ENTRYPOINT and CMD left to the manifests."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from cachetool.engines.vllm import releases

    ins = _dockerfile_instructions(VLLM_DOCKERFILE)
    assert _dockerfile_base(ins) == f"vllm/vllm-openai:v{releases.TESTED_CUDA[-1]}"

    installs = _pip_installs(ins)
    project = [a for a in installs if "." in _pip_targets(a)]
    assert len(project) == 1 and _pip_targets(project[0]) == ["."], installs
    assert "--no-deps" in project[0], "the project's `torch>=2.11` would let pip replace vLLM's torch"
    run_of_project = next(n for n, (i, a) in enumerate(ins) if i == "RUN" and re.search(r"install (\S+ )*\.(\s|$)", a))
    copies = " ".join(a for n, (i, a) in enumerate(ins) if i in {"COPY", "ADD"} and n < run_of_project)
    for needed in ("pyproject.toml", "README.md", "cachetool", "compiler"):
        assert needed in copies, f"{needed} is not copied before the project is installed"

    named = [a for a in installs if a is not project[0]]
    assert all(not set(a) & {"-r", "--requirement"} for a in named), "the dependencies are listed in the Dockerfile"
    assert all(set(a) & {"-c", "--constraint"} for a in named), (
        "an unconstrained install may replace the base's packages"
    )
    installed = {
        (canonicalize_name(r.name), str(r.specifier)) for a in named for r in map(Requirement, _pip_targets(a))
    }
    deps = map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    wanted = {(canonicalize_name(r.name), str(r.specifier)) for r in deps if canonicalize_name(r.name) != "torch"}
    assert installed == wanted, (
        f"pyproject.toml's dependencies but torch: {sorted(wanted)}; installed {sorted(installed)}"
    )

    names = [i for i, _ in ins]
    users = [a for i, a in ins if i == "USER"]
    assert users and users[-1].split(":")[0] == "10001", users
    assert max(n for n, i in enumerate(names) if i == "USER") > max(n for n, i in enumerate(names) if i == "RUN")
    assert not {"ENTRYPOINT", "CMD"} & set(names), "the manifests give every container its command"


def test_vllm_manifests_run_the_image_built_from_ci_dockerfile_vllm():
    """Every container of ci/k8s/vllm/ runs `vllm-cachetool:<the Dockerfile's vLLM release>`, gives its own command,
    and the pod runs as the Dockerfile's user."""
    from cachetool.engines.vllm import releases

    ins = _dockerfile_instructions(VLLM_DOCKERFILE)
    release = re.fullmatch(r"vllm/vllm-openai:v([\d.]+)", _dockerfile_base(ins)).group(1)
    assert release == releases.TESTED_CUDA[-1]
    user = [a for i, a in ins if i == "USER"][-1].split(":")
    for where, _pod, c in _vllm_containers():
        assert c["image"] == f"{VLLM_IMAGE_REPO}:{release}", where
        assert c.get("command"), f"{where}: no command (the image leaves ENTRYPOINT to the manifests)"
    for where, pod in _vllm_pods():
        sc = pod["securityContext"]
        assert str(sc["runAsUser"]) == user[0] and str(sc["runAsGroup"]) == (user[1:] or user)[0], where


def test_vllm_warm_pull_and_server_share_the_servers_environment_and_a_writable_root():
    """The five variables through which a vLLM server on a GPU reads the pulled root's JIT caches, as `pull` prints
    them, are set in the warm Job, the init-container and the server; the three environments are one but for the
    registry credentials (HOME too: vLLM 0.26 hashes VLLM_CONFIG_ROOT, derived from it); the cache root is the same
    path in the warm and the server (FlashInfer's JIT cache hits only at the path it was built at) and is a writable
    emptyDir in every container (vLLM writes under it at every start), as is HOME."""
    from cachetool.engines.vllm import jit_caches

    dep = _one(VLLM_DEPLOYMENT, "Deployment")["spec"]["template"]["spec"]
    (init,), (server,) = dep["initContainers"], dep["containers"]
    job = _one(VLLM_WARM_JOB, "Job")["spec"]["template"]["spec"]
    (warm,) = job["containers"]
    pull_argv, _ = _split_at_dashes(_argv(init))
    warm_argv, _ = _split_at_dashes(_argv(warm))
    root = _flag_value(pull_argv, "--cache-root")
    assert _flag_value(warm_argv, "--cache-root") == root

    wanted = {"VLLM_CACHE_ROOT": root, **jit_caches.server_environment(Path(root), gpu=True)}
    assert len(wanted) == 5, wanted
    credentials = {"DOCKER_CONFIG"}
    server_env = list(server.get("env") or [])
    for where, pod, c in _vllm_containers():
        env = {e["name"]: e for e in c.get("env") or []}
        values = {name: e.get("value") for name, e in env.items()}
        assert values.items() >= wanted.items(), f"{where}: {values}"
        others = sorted((e for n, e in env.items() if n not in credentials), key=lambda e: e["name"])
        assert others == sorted(server_env, key=lambda e: e["name"]), f"{where}: not the server's environment"
        for path in (root, values["HOME"]):
            mount = _mount_for(c, path)
            assert mount["mountPath"] == path and not mount.get("readOnly"), f"{where}: {path} is not writable"
            assert "emptyDir" in _volume(pod, mount["name"]), f"{where}: {path} is not an emptyDir"


def test_the_deployments_word_on_pull_outcomes_is_the_exit_tables():
    """The init-container's comment says which pull outcomes still fail the pod under --on-miss continue: the exit
    table's (cachetool/exit_codes.py). It said 1 still failed, which the table continues (exit 0, outcome=error)."""
    from cachetool import exit_codes

    text = (ROOT / "ci" / "k8s" / "deployment.yaml").read_text()
    comment = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    comment = comment[comment.index("Pull outcomes") :]
    continued = re.search(r"also 0 for every outcome that leaves nothing installed \(([^)]*)\)", comment)
    failing = re.search(r"Only (.*?) still fails? the init-container", comment)
    assert continued and failing, comment[:400]
    table_continued = {e.name for e in exit_codes.TABLE if e.continuable}
    assert {n.strip() for n in continued.group(1).split(",")} == table_continued
    named_failing = {int(n) for n in re.findall(r"\b(\d+) \(", failing.group(1))}
    assert named_failing == {
        e.code for e in exit_codes.TABLE if not e.continuable and e.code not in (0, 8, 10, 130)
    }  # pull's own failures
