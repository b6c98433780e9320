"""deny-header in Python: denies a request whose header, sent as `action.properties` of an
authorization instance, has a given value (`x-plugin-deny: true`), and allows every other.

Built into a component of the mixer:adapter@0.1.0 world by componentize-py (build.sh beside
this file); the mixer runs it as it runs the Rust example.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world import (
    CheckResult,
    FieldError,
    FieldValue_Map,
    PluginInfo,
    Template,
    Value_String,
)

PERMISSION_DENIED = 7
# As the Rust SDK's CheckResult.allow(): the mixer may reuse an answer for 5 s or 10,000
# uses (bounded by the check cache), so most requests never reach the plugin.
VALID_MS = 5_000
VALID_USES = 10_000


def _config(text):
    config = json.loads(text or "{}")
    return (
        config.get("header", ""),
        config.get("value", "true"),
        config.get("message", "denied by plugin"),
    )


class WitWorld(wit_world.WitWorld):
    def info(self):
        return PluginInfo(name="python-deny", templates=[Template.AUTHORIZATION])

    def validate(self, config):
        try:
            header, _, _ = _config(config)
        except ValueError as e:
            return [FieldError(path="", message=f"not JSON: {e}")]
        if not isinstance(header, str) or not header.strip():
            return [FieldError(path="header", message="must not be empty")]
        return []

    def check(self, config, instance):
        header, value, message = _config(config)
        for field in instance.fields:
            if field.name != "action.properties" or not isinstance(field.value, FieldValue_Map):
                continue
            for key, v in field.value.value:
                if key == header and isinstance(v, Value_String) and v.value == value:
                    return CheckResult(
                        code=PERMISSION_DENIED,
                        message=message,
                        valid_duration_ms=VALID_MS,
                        valid_use_count=VALID_USES,
                    )
        return CheckResult(
            code=0, message="", valid_duration_ms=VALID_MS, valid_use_count=VALID_USES
        )

    def quota(self, config, instance, args):
        raise Err("python-deny serves no quota")

    def report(self, config, batch):
        raise Err("python-deny serves no reports")
