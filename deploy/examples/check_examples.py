"""Validates the Istio and Envoy Gateway examples offline, against schemas kept in the repository.

Usage:
  check_examples.py            renders deploy/examples/istio and deploy/examples/envoy-gateway
                               with `kubectl kustomize` and checks every object, and
                               istio/mesh-config.yaml's meshConfig
  check_examples.py FILE...    checks these files instead: rendered objects (several
                               documents), or Helm values holding a `meshConfig`

Custom resources are checked against their CRD's openAPIV3Schema (deploy/examples/schemas/,
extracted from a named Istio and Envoy Gateway release by schemas/extract.py), with unknown
fields refused, as the API server's strict field validation (kubectl's default) refuses them.
Built-in kinds go to kubernetes-validate (Kubernetes 1.32, --strict), as in
tests/tests/deploy_kubernetes.rs. An object of a kind with no schema here is an error. The
mesh config's extension providers are checked against Istio's MeshConfig message.

Not checked: the CEL rules of the CRDs (`x-kubernetes-validations`; no CEL evaluator here),
value formats (`format:`), and what only a cluster knows (that the Services, routes and
providers named exist). Exit 0 when everything validates, else 1 with one line per problem.
"""
import glob
import json
import os
import subprocess
import sys

import jsonschema
import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
KUBERNETES_VERSION = "1.32"
EXAMPLES = ["istio", "envoy-gateway"]
MESH_CONFIGS = ["istio/mesh-config.yaml"]


def strict(node):
    """OpenAPI v3 (CRD dialect) to JSON Schema draft 4: objects with `properties` refuse other
    fields unless they say they keep unknown ones; `nullable` admits null."""
    if isinstance(node, list):
        return [strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def load_schemas():
    crds, mesh = {}, None
    for path in sorted(glob.glob(os.path.join(HERE, "schemas", "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if "openAPIV3Schema" in doc:
            api_version = f"{doc['group']}/{doc['version']}"
            schema = strict(doc["openAPIV3Schema"])
            # Every object has these, whether or not its CRD's schema spells them out (Istio's
            # do not).
            for field, of in [("apiVersion", "string"), ("kind", "string"), ("metadata", "object")]:
                schema["properties"].setdefault(field, {"type": of})
            validator = jsonschema.Draft4Validator(schema)
            crds[(api_version, doc["kind"])] = (validator, os.path.basename(path))
        else:
            mesh = (jsonschema.Draft202012Validator(doc["schema"]), os.path.basename(path))
    return crds, mesh


def where(error):
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return text.lstrip(".") or "(top)"


def check_object(obj, crds, origin, problems):
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    name = f"{origin}: {kind}/{(obj.get('metadata') or {}).get('name')}"
    if (api_version, kind) in crds:
        validator, schema = crds[(api_version, kind)]
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
        for e in errors:
            problems.append(f"{name}: {where(e)}: {e.message} (schema {schema})")
        return f"{name}: valid against {schema}" if not errors else None
    # Kubernetes' own groups are unqualified (apps, policy) or end in .k8s.io; any other
    # group is a custom resource, which needs its schema here.
    group = api_version.rpartition("/")[0]
    if "." in group and not group.endswith(".k8s.io"):
        problems.append(f"{name}: no schema for {api_version} {kind} in deploy/examples/schemas")
        return None
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        problems.append(f"{name}: {'.'.join(str(p) for p in e.path) or '(top)'}: {e.message} (Kubernetes {KUBERNETES_VERSION})")
        return None
    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
        problems.append(f"{name}: no schema for {api_version} {kind}: {e}")
        return None
    return f"{name}: valid against Kubernetes {KUBERNETES_VERSION}"


def check_mesh(values, mesh, origin, problems):
    validator, schema = mesh
    config = values.get("meshConfig")
    if not isinstance(config, dict) or not config.get("extensionProviders"):
        problems.append(f"{origin}: no meshConfig.extensionProviders")
        return None
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    for e in errors:
        problems.append(f"{origin}: meshConfig.{where(e)}: {e.message} (schema {schema})")
    return f"{origin}: meshConfig valid against {schema}" if not errors else None


def render(example):
    out = subprocess.run(
        ["kubectl", "kustomize", os.path.join(HERE, example)], capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(f"kubectl kustomize {example}: {out.stderr}")
    return out.stdout


def main(files):
    crds, mesh = load_schemas()
    if files:
        inputs = []
        for path in files:
            with open(path) as f:
                inputs.append((path, f.read()))
    else:
        inputs = [(f"{name} (rendered)", render(name)) for name in EXAMPLES]
        for path in MESH_CONFIGS:
            with open(os.path.join(HERE, path)) as f:
                inputs.append((path, f.read()))
    problems, checked = [], []
    for origin, text in inputs:
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            if "meshConfig" in doc:
                said = check_mesh(doc, mesh, origin, problems)
            else:
                said = check_object(doc, crds, origin, problems)
            if said:
                checked.append(said)
    for line in checked:
        print(line)
    for line in problems:
        print(f"INVALID {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
