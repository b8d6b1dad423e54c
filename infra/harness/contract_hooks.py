"""Schemathesis hooks for infra/harness/contract.py.

`cargo lambda watch`, which stands in for API Gateway locally, cannot turn a
JSON request whose bytes are not UTF-8 into a Lambda event: it answers 500
itself, before any function runs (API Gateway would deliver the body base64
encoded). Such bodies are left out here; the handlers' answer to them
(INVALID_REQUEST) is covered by the integration tests, which build the
events directly (tests/integration/bad_input.rs).
"""
import schemathesis


def _utf8(value):
    if isinstance(value, (bytes, bytearray)):
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return False
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


@schemathesis.hook
def filter_case(ctx, case):
    return _utf8(case.body)
