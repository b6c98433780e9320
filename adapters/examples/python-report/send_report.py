"""send_report: sends one Mixer v1 report (`istio.mixer.v1.Mixer/Report`) to the mixer, from the
stubs generated from the workspace's proto/ (adapters/sdk-python/stubs).

    python adapters/examples/python-report/send_report.py [--mixer ADDR] NAME=VALUE...
    python adapters/examples/python-report/send_report.py request.method=GET \\
        request.path=/hello response.code=200 'request.headers={"x-user": "alice"}'

The mixer is at 127.0.0.1:9091 unless --mixer says otherwise. A VALUE that parses as JSON is
that (200 an int, 0.5 a float, true a bool, {...} a string map), anything else is text; the
mixer converts text to the attribute's declared type (an IP address, a timestamp, ...).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../sdk-python/stubs"))
import grpc  # noqa: E402
from istio.mixer.v1 import attributes_pb2, mixer_pb2, mixer_pb2_grpc  # noqa: E402


def compress(attributes):
    """One record as CompressedAttributes, every name and string in the record's own `words`
    (index -1 is words[0], -2 words[1], ...), so no global dictionary is needed."""
    record = attributes_pb2.CompressedAttributes()

    def word(text):
        record.words.append(text)
        return -len(record.words)

    for name, value in attributes.items():
        key = word(name)
        if isinstance(value, bool):
            record.bools[key] = value
        elif isinstance(value, int):
            record.int64s[key] = value
        elif isinstance(value, float):
            record.doubles[key] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                record.string_maps[key].entries[word(k)] = word(str(v))
        else:
            record.strings[key] = word(str(value))
    return record


def send(mixer, *records, timeout=5.0):
    """Reports `records` (dicts of attribute name to value) to the mixer at `mixer`."""
    request = mixer_pb2.ReportRequest(
        attributes=[compress(r) for r in records],
        repeated_attributes_semantics=mixer_pb2.ReportRequest.INDEPENDENT_ENCODING)
    with grpc.insecure_channel(mixer) as channel:
        mixer_pb2_grpc.MixerStub(channel).Report(request, timeout=timeout)


def value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Sends one Mixer v1 report to the mixer.")
    parser.add_argument("--mixer", default="127.0.0.1:9091", help="the mixer's --grpc-addr")
    parser.add_argument("attributes", nargs="+", metavar="NAME=VALUE")
    args = parser.parse_args()
    pairs = [a.partition("=") for a in args.attributes]
    if any(not sep or not name for name, sep, _ in pairs):
        parser.error("attributes are NAME=VALUE")
    try:
        send(args.mixer, {name: value(v) for name, _, v in pairs})
    except grpc.RpcError as e:
        sys.exit("report failed: %s: %s" % (e.code().name, e.details()))
    print("reported", len(pairs), "attributes to", args.mixer)
