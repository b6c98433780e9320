"""allowed-users: an out-of-process Mixer check adapter for the `listentry` template, in Python.

Allows a request when the instance's value (say, the x-user header) is one of the handler's
`params.users`, denies it otherwise. An empty value is denied too.

    python adapters/examples/python-check/adapter.py [ADDR]        (default 127.0.0.1:9072)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../sdk-python"))
from mixer_adapter import Adapter, allow, deny, serve  # noqa: E402


class AllowedUsers(Adapter):
    """Allows the users listed in params.users."""

    def validate(self, params):
        users = params.get("users")
        if not isinstance(users, list) or not all(isinstance(u, str) and u for u in users):
            return "params.users: expected a list of user names"
        return None

    def open(self, params):
        return frozenset(params["users"])  # what handle_listentry gets, once per session

    def handle_listentry(self, instance, users):
        if instance.value in users:
            return allow(valid_for=1.0)
        return deny("%r is not an allowed user" % instance.value, valid_for=1.0)


if __name__ == "__main__":
    serve(AllowedUsers(), default_address="127.0.0.1:9072")
