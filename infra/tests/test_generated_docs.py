"""The generated parts of the docs (`infra/gen_docs.py`, `make docs`) are
fresh, and what they are generated from agrees with the code: the metric
table's function and dimension, read from each `Metric` variant's doc
comment, are the ones the code emits it with."""

from infra import gen_docs
from infra.tests.test_template_alarms import emitted_metrics


def test_the_metric_table_is_the_one_the_code_generates():
    doc = gen_docs.CONFIGURATION.read_text()
    assert gen_docs.with_metrics(doc, gen_docs.metrics_table()) == doc, "stale: run `make docs`"


def test_each_metric_s_comment_names_the_function_and_dimension_it_is_emitted_with():
    emitted = emitted_metrics()
    documented = {name: (function, dim) for name, function, dim, _ in gen_docs.metric_docs()}
    assert documented == emitted


def test_a_metric_added_to_the_code_without_make_docs_is_caught():
    src = gen_docs.METRICS_RS.read_text().replace(
        "    DlqDepth,\n", "    DlqDepth,\n    /// reconciler: a metric nobody documented.\n    Undocumented,\n", 1
    )
    doc = gen_docs.CONFIGURATION.read_text()
    assert gen_docs.with_metrics(doc, gen_docs.metrics_table(src)) != doc
    assert "`Undocumented`" in gen_docs.metrics_table(src)


def test_a_comment_that_names_another_dimension_is_caught():
    src = gen_docs.METRICS_RS.read_text().replace(
        "/// reconciler, by `Coupon`: shards rebuilt", "/// reconciler, by `Shard`: shards rebuilt", 1
    )
    documented = {name: (function, dim) for name, function, dim, _ in gen_docs.metric_docs(src)}
    assert documented["ShardsRebuilt"] != emitted_metrics()["ShardsRebuilt"]
