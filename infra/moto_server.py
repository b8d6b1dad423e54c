#!/usr/bin/env python3
"""moto server for the local stack, with DynamoDB writes made atomic.

Real DynamoDB applies writes to one item one at a time: a conditional
`SET issued = issued + 1` never loses an update. moto's threaded server runs
concurrent requests against the same in-memory item without a lock, so two
concurrent transactions on one counter can both read the old value. This
launcher runs moto's own WSGI application and serializes DynamoDB requests
(identified by their `X-Amz-Target`), which restores the semantics the code
relies on; SQS and everything else stay concurrent.

Usage: moto_server.py [-H HOST] [-p PORT]
"""
import argparse
import os
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


class SerializeDynamoDB:
    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("DynamoDB"):
            return self.app(environ, start_response)
        with self.lock:
            # Consume the whole response inside the lock.
            return list(self.app(environ, start_response))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerializeDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
