"""metrics-to-file: an out-of-process Mixer adapter for the `metric` template, in Python.

Each metric instance the mixer reports becomes one JSON line appended to the file named by the
handler's `params.path`: {"name": ..., "value": ..., "dimensions": {...}}.

    python adapters/examples/python-metrics/adapter.py [ADDR]      (default 127.0.0.1:9071)
"""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../sdk-python"))
from mixer_adapter import Adapter, serve  # noqa: E402


class MetricsToFile(Adapter):
    """Appends each reported metric to params.path as a JSON line."""

    lock = threading.Lock()  # one batch's lines stay together

    def validate(self, params):
        return None if isinstance(params.get("path"), str) else "params.path: expected a file path"

    def handle_metric(self, instances, params):
        lines = "".join(json.dumps({"name": i.name, "value": i.value, "dimensions": i.dimensions},
                                   sort_keys=True, default=str) + "\n" for i in instances)
        with self.lock, open(params["path"], "a", encoding="utf-8") as out:
            out.write(lines)


if __name__ == "__main__":
    serve(MetricsToFile(), default_address="127.0.0.1:9071")
