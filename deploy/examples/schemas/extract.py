"""Writes the JSON schemas check_examples.py validates the Istio and Envoy Gateway examples with.

Run by hand when moving to another Istio or Envoy Gateway release (see schemas/README.md for
the commands that produce the inputs from the upstream repositories); CI only reads the output.

Usage:
  extract.py crd FILE.yaml CRD_NAME VERSION SOURCE KEEP... > OUT.json
      The openAPIV3Schema of one version of one CustomResourceDefinition in FILE (several CRDs
      may share the file). KEEP lists the spec fields kept ("*" for all): the others are left
      out, so an example using them fails until they are kept here, never passes unchecked.
      A dotted KEEP (telemetry.accessLog) keeps one field of a field.
  extract.py mesh DESCRIPTOR_SET SOURCE > OUT.json
      A JSON schema of istio.mesh.v1alpha1.MeshConfig's extensionProviders and
      defaultProviders (the fields the examples set), derived from the compiled protos
      (`protoc --include_imports --descriptor_set_out`) with proto3's JSON mapping.

`description` texts are left out to keep the files small; CEL rules (`x-kubernetes-validations`)
are kept, though jsonschema does not run them (check_examples.py says so).
"""
import json
import sys

import yaml


def strip_descriptions(node):
    if isinstance(node, dict):
        return {
            k: strip_descriptions(v)
            for k, v in node.items()
            # A property may be called "description"; only the annotation is dropped.
            if not (k == "description" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def prune(node, keep, name):
    """Keeps the fields of `keep` (dotted paths below `node`, an object schema) and leaves out
    their siblings: "telemetry.accessLog" keeps `telemetry` with only `accessLog` in it."""
    heads = {}
    for path in keep:
        head, _, rest = path.partition(".")
        heads.setdefault(head, []).extend([rest] if rest else [])
    fields = node["properties"]
    missing = [k for k in heads if k not in fields]
    if missing:
        sys.exit(f"{name}: no field {missing}")
    node["properties"] = {k: fields[k] for k in heads}
    if node.get("required"):
        node["required"] = [k for k in node["required"] if k in heads]
    for head, rests in heads.items():
        if rests:
            prune(fields[head], rests, name)


def crd(path, name, version, source, keep):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    found = [d for d in docs if d.get("kind") == "CustomResourceDefinition" and d["metadata"]["name"] == name]
    if len(found) != 1:
        sys.exit(f"{path}: {len(found)} CustomResourceDefinitions named {name}")
    spec = found[0]["spec"]
    versions = [v for v in spec["versions"] if v["name"] == version]
    if len(versions) != 1:
        sys.exit(f"{name}: no version {version}")
    schema = versions[0]["schema"]["openAPIV3Schema"]
    if keep != ["*"]:
        prune(schema["properties"]["spec"], keep, name)
    return {
        "source": source,
        "group": spec["group"],
        "kind": spec["names"]["kind"],
        "version": version,
        "keptSpecFields": keep,
        "openAPIV3Schema": strip_descriptions(schema),
    }


# proto3 JSON mapping of the scalar field types (google/protobuf/descriptor.proto's Type).
SCALARS = {
    1: {"type": "number"},  # double
    2: {"type": "number"},  # float
    3: {"type": ["integer", "string"]},  # int64
    4: {"type": ["integer", "string"]},  # uint64
    5: {"type": "integer"},  # int32
    8: {"type": "boolean"},
    9: {"type": "string"},
    12: {"type": "string"},  # bytes, base64
    13: {"type": "integer", "minimum": 0},  # uint32
    17: {"type": "integer"},  # sint32
}
WELL_KNOWN = {
    ".google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]+)?s$"},
    ".google.protobuf.Struct": {"type": "object"},
    ".google.protobuf.Value": {},
    ".google.protobuf.BoolValue": {"type": "boolean"},
    ".google.protobuf.StringValue": {"type": "string"},
    ".google.protobuf.UInt32Value": {"type": "integer", "minimum": 0},
    ".google.protobuf.Int32Value": {"type": "integer"},
    ".google.protobuf.DoubleValue": {"type": "number"},
}


def mesh(descriptor_path, source):
    from google.protobuf import descriptor_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    with open(descriptor_path, "rb") as f:
        fds.ParseFromString(f.read())
    messages, enums = {}, {}

    def collect(prefix, message):
        full = f"{prefix}.{message.name}"
        messages[full] = message
        for nested in message.nested_type:
            collect(full, nested)
        for enum in message.enum_type:
            enums[f"{full}.{enum.name}"] = enum

    for file in fds.file:
        for message in file.message_type:
            collect(f".{file.package}", message)
        for enum in file.enum_type:
            enums[f".{file.package}.{enum.name}"] = enum

    defs = {}

    def ref(type_name):
        if type_name in WELL_KNOWN:
            return WELL_KNOWN[type_name]
        key = type_name.lstrip(".")
        if key not in defs:
            defs[key] = None
            defs[key] = message_schema(messages[type_name])
        return {"$ref": f"#/$defs/{key}"}

    def field_schema(field):
        if field.type == 11:  # message
            message = messages.get(field.type_name)
            if message is not None and message.options.map_entry:
                value = field_schema(message.field[1])
                return {"type": "object", "additionalProperties": value}
            one = ref(field.type_name)
        elif field.type == 14:  # enum
            values = [v.name for v in enums[field.type_name].value]
            one = {"enum": values + [v.number for v in enums[field.type_name].value]}
        else:
            one = SCALARS[field.type]
        if field.label == 3:  # repeated
            return {"type": "array", "items": one}
        return one

    def message_schema(message, only=None):
        properties, oneofs = {}, {}
        for field in message.field:
            if only is not None and field.name not in only:
                continue
            schema = field_schema(field)
            # Both spellings are accepted by Istio's parser (jsonpb); YAML uses lowerCamel.
            properties[field.json_name] = schema
            if field.name != field.json_name:
                properties[field.name] = schema
            if field.HasField("oneof_index") and not field.proto3_optional:
                oneofs.setdefault(field.oneof_index, []).extend({field.json_name, field.name})
        schema = {"type": "object", "properties": properties, "additionalProperties": False}
        # At most one member of each oneof.
        exclusive = []
        for members in oneofs.values():
            members = sorted(members)
            for i, a in enumerate(members):
                for b in members[i + 1 :]:
                    exclusive.append({"required": [a, b]})
        if exclusive:
            schema["not"] = {"anyOf": exclusive}
        return schema

    top = message_schema(
        messages[".istio.mesh.v1alpha1.MeshConfig"], only={"extension_providers", "default_providers"}
    )
    return {
        "source": source,
        "message": "istio.mesh.v1alpha1.MeshConfig",
        "keptFields": ["extensionProviders", "defaultProviders"],
        "schema": {"$schema": "https://json-schema.org/draft/2020-12/schema", **top, "$defs": defs},
    }


def main(argv):
    if len(argv) >= 6 and argv[0] == "crd":
        out = crd(argv[1], argv[2], argv[3], argv[4], argv[5:])
    elif len(argv) == 3 and argv[0] == "mesh":
        out = mesh(argv[1], argv[2])
    else:
        sys.exit(__doc__)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
