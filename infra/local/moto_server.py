#!/usr/bin/env python3
"""moto server for the local stack, with DynamoDB writes made atomic.

Real DynamoDB applies writes to one item one at a time: a conditional
`SET issued = issued + 1` never loses an update. moto's threaded server runs
concurrent requests against the same in-memory item without a lock, so two
concurrent transactions on one counter can both read the old value. This
launcher runs moto's own WSGI application and serializes DynamoDB requests
(identified by their `X-Amz-Target`), which restores the semantics the code
relies on; SQS and everything else stay concurrent.

It also replaces moto's TransactWriteItems (moto 5.2.5, pinned in
requirements.txt): moto deep-copies every table a transaction names before
applying it, so each transaction costs as much as the whole table, and a
long run (the contract test's thousands of generated calls, the demo)
slows until calls time out. This one checks every condition first and
applies only when all hold, keeping a copy of just the items it touches in
case applying fails: the same all-or-nothing result, at the cost of the
transaction's own items.

And it keeps a Query's cost to the partition it reads (see `query` below):
moto lists and sorts the whole table for each one; an item read's answer
to encoding its JSON (see `execute_result`): moto's serializer walks the
output shape attribute by attribute; and an SQS send's cost to a pass over
the queue's messages (see `_messages`).

Usage: moto_server.py [-H HOST] [-p PORT]
"""
import argparse
import copy
import json
import os
import threading

from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoResult
from moto.core.responses import ActionResult
from moto.sqs.models import Queue
from moto.core.utils import unix_time_millis

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


def transact_write_items(self, transact_items):
    """All conditions checked against the current items, then all writes
    applied; nothing written when any condition fails. Runs under the
    launcher's DynamoDB lock, so nothing changes between the two phases."""
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    targets = set()
    planned = []
    reasons = []
    for entry in transact_items:
        if len(entry) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(entry.items()))
        if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
            reasons.append(("ValidationError", "Unsupported transaction operation", None))
            continue
        table_name = op["TableName"]
        table = self.get_table(table_name)
        if op_type == "Put":
            attrs = op["Item"]
            key = {table.hash_key_attr: attrs[table.hash_key_attr]}
            if table.range_key_attr is not None:
                key[table.range_key_attr] = attrs[table.range_key_attr]
        else:
            key = op["Key"]
        unique = (str(table_name), str(dict(sorted(key.items()))))
        if unique in targets:
            raise MultipleTransactionsException()
        targets.add(unique)
        current = self.get_item(table_name, key)
        condition = op.get("ConditionExpression")
        if condition is not None:
            check = get_filter_expression(
                condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            )
            if not check.expr(current):
                old = None
                if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                    old = current.to_json()["Attributes"]
                reasons.append(("ConditionalCheckFailed", "The conditional request failed", old))
                continue
        reasons.append((None, None, None))
        planned.append((op_type, op, table_name, key))
    if any(code is not None for code, _, _ in reasons):
        raise TransactionCanceledException(reasons)
    applied = []
    try:
        for op_type, op, table_name, key in planned:
            if op_type == "ConditionCheck":
                continue
            before = self.get_item(table_name, key)
            applied.append((table_name, key, copy.deepcopy(before)))
            names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            if op_type == "Put":
                self.put_item(table_name, op["Item"])
            elif op_type == "Delete":
                self.delete_item(table_name, key)
            else:
                self.update_item(
                    table_name,
                    key,
                    update_expression=op["UpdateExpression"],
                    condition_expression=None,
                    expression_attribute_names=names,
                    expression_attribute_values=values,
                )
    except Exception:
        for table_name, key, before in reversed(applied):
            if before is None:
                self.delete_item(table_name, key)
            else:
                self.put_item(table_name, before.to_json()["Attributes"])
        raise


DynamoDBBackend.transact_write_items = transact_write_items


# A Query in moto walks every item of the table, in key order: `all_items`
# lists and sorts the whole table on every call, so a long run (the
# integration tests on a second engine, the fault suite's later scenarios)
# pays for every item written before it, and calls that take milliseconds
# on a fresh endpoint take seconds. DynamoDB reads only the partition (or
# the index's partition). During a Query, `all_items` here hands moto's
# own filter just the items it can match: the partition's, for a query on
# the table (moto keeps items by partition key), or every item unsorted,
# for a query on an index (moto sorts what matches afterwards). The
# results are moto's; only the work it discards is skipped.
_moto_query = Table.query
_moto_all_items = Table.all_items


def query(self, hash_key, *args, **kwargs):
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    # Runs under the launcher's DynamoDB lock: one request at a time.
    self._query_scope = ("index", None) if index_name else ("partition", hash_key)
    try:
        return _moto_query(self, hash_key, *args, **kwargs)
    finally:
        self._query_scope = None


def all_items(self):
    scope = getattr(self, "_query_scope", None)
    if scope is None:
        return _moto_all_items(self)
    kind, key = scope
    if kind == "partition":
        if key not in self.items:
            return []
        part = self.items[key]
        return list(part.values()) if self.range_key_attr else [part]
    if self.range_key_attr:
        return [item for part in self.items.values() for item in part.values()]
    return list(self.items.values())


Table.query = query
Table.all_items = all_items


# moto's generic response serializer walks the operation's output shape for
# every attribute of every item: a Query answering 100 items took 180 ms
# of the 240 it cost, under the lock every DynamoDB call waits for. An item
# read's result is already DynamoDB JSON (strings, numbers as strings,
# lists and maps of them), so it is encoded as it is, with the status and
# headers moto's serializer gives an empty result; a result holding
# anything JSON has no form for (a timestamp, bytes) goes the slow way.
_FAST_JSON = {"Query", "Scan", "GetItem", "BatchGetItem", "PutItem", "UpdateItem", "DeleteItem",
              "TransactGetItems"}
_moto_execute_result = DynamoResult.execute_result


def execute_result(self, context):
    if context.operation_model.name in _FAST_JSON and isinstance(self.result, dict):
        try:
            body = json.dumps(self.result)
        except (TypeError, ValueError):
            return _moto_execute_result(self, context)
        status, headers, _ = ActionResult({}).execute_result(context)
        return status, headers, body
    return _moto_execute_result(self, context)


DynamoResult.execute_result = execute_result


# moto's SQS reads every message's visibility and delay through a clock
# call of its own (a datetime round trip each), and computes every queue
# attribute, the message counts among them, several times per SendMessage:
# with a backlog of 500 grants on the queue (a paused issuer), a send took
# 100 ms. The counts here read the clock once per call; each message is
# judged as moto judges it, at that one instant.
def _messages(self):
    now = unix_time_millis()
    return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]


def _delayed(self):
    now = unix_time_millis()
    return sum(1 for m in self._messages if now < m.delayed_until)


def _not_visible(self):
    now = unix_time_millis()
    return sum(1 for m in self._messages if not now > m.visible_at)


Queue.messages = property(_messages)
Queue.approximate_number_of_messages_delayed = property(_delayed)
Queue.approximate_number_of_messages_not_visible = property(_not_visible)


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
