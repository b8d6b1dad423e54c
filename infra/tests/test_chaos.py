"""The availability figures `make chaos` reports beside the promise: what
the users could not do during a fault, computed from the answers heard."""

from infra.harness import chaos, sale, scenarios


def test_the_longest_stretch_of_undecided_answers_runs_from_the_first_busy_to_the_next_decision():
    answers = [  # (answered, sent, code)
        (1.0, 0.9, "SUCCESS"),
        (1.5, 1.4, "BUSY"),
        (2.0, 1.9, "GATEWAY_ERROR"),
        (4.0, 3.9, "SOLD_OUT"),
        (4.2, 4.1, "BUSY"),
        (4.3, 4.2, "ALREADY_CLAIMED"),
    ]
    figures = scenarios.availability(answers, healed_at=1.95, began=0.5)
    assert figures == {"busy": 3, "unavailable_ms": 2500, "recovery_ms": 2050, "unavailable_at": [1.0, 3.5]}


def test_an_answer_in_flight_across_the_end_of_the_fault_is_no_recovery():
    answers = [(3.0, 1.0, "SUCCESS"), (3.5, 3.2, "BUSY"), (6.0, 5.5, "SUCCESS")]
    # The first SUCCESS was sent before the fault ended at 2.0: the first
    # press sent after it was decided at 6.0.
    assert scenarios.availability(answers, healed_at=2.0, began=0.0)["recovery_ms"] == 4000


def test_a_stretch_still_open_when_the_presses_end_counts_to_the_last_answer():
    answers = [(1.0, 0.9, "SUCCESS"), (2.0, 1.9, "BUSY"), (9.0, 8.9, "TRANSPORT_ERROR")]
    figures = scenarios.availability(answers, healed_at=None, began=0.0)
    assert figures == {"busy": 2, "unavailable_ms": 7000, "recovery_ms": None, "unavailable_at": [2.0, 9.0]}


def test_a_sale_closed_longer_than_ten_seconds_fails_the_full_run_but_not_the_promise():
    kept = {"oversell": 0, "duplicates": 0, "lost": 0, "rejected_after_success": 0, "early": 0, "issued": 40,
            "winners": 40, "drift": 0, "unavailable_ms": chaos.MAX_UNAVAILABLE_MS + 1}
    assert chaos.passed(kept)
    assert not chaos.passed(kept, availability=True)
    assert chaos.passed({**kept, "unavailable_ms": chaos.MAX_UNAVAILABLE_MS}, availability=True)
    assert not chaos.passed({**kept, "lost": 1})


def test_a_backlog_scenario_whose_fault_found_too_few_grants_queued_fails_the_full_run():
    kept = {"oversell": 0, "duplicates": 0, "lost": 0, "rejected_after_success": 0, "early": 0, "issued": 40,
            "winners": 40, "drift": 0, "unavailable_ms": 4_000, "queued_at_fault": scenarios.BACKLOG_GRANTS - 1}
    assert chaos.passed(kept)
    assert not chaos.passed(kept, availability=True)
    assert chaos.passed({**kept, "queued_at_fault": scenarios.BACKLOG_GRANTS}, availability=True)


WAVES = [(1_000, 2), (5_000, 1)]


def _granted(*instants):
    return [{"granted_at_ms": {"N": str(at)}} for at in instants]


def test_a_unit_won_before_its_wave_s_instant_is_early_and_none_is_without_waves():
    assert scenarios.early(WAVES, _granted(1_000, 1_200, 5_000)) == 0
    # The third unit was won before the second wave released it.
    assert scenarios.early(WAVES, _granted(1_000, 1_200, 4_999)) == 1
    assert scenarios.early(WAVES, _granted(999)) == 1
    assert scenarios.early([], _granted(1, 2, 3)) == 0


def test_the_summary_names_the_fault_steps_around_a_long_stretch_whichever_harness_logged_them(capsys):
    kept = {"oversell": 0, "duplicates": 0, "lost": 0, "rejected_after_success": 0, "early": 0, "issued": 40,
            "winners": 40, "drift": 0, "busy": 9, "recovery_ms": 100}
    report = {"engines": {"valkey-8.0": {"scenarios": {
        # The sale harness stamps each step with the wall clock; a report
        # written before it did (or by another harness) has no stamp.
        "snapshot_restore": {**kept, "unavailable_ms": 7000, "unavailable_at": [3.0, 10.0],
                             "injected": [{"atSecond": 9.5, "at": "19:04:42", "what": "every node killed"}]},
        "redis_flush_lottery": {**kept, "unavailable_ms": 12000, "unavailable_at": [0.3, 12.3],
                                "injected": [{"atSecond": 0.3, "what": "Redis FLUSHALL"}]},
        "flush_with_backlog": {**kept, "unavailable_ms": 100, "unavailable_at": [1.0, 1.1], "injected": [],
                               "queued_at_fault": 597},
    }}}}
    failed, flat = chaos.summarize(report, short=False)
    out = capsys.readouterr().out
    assert failed == ["valkey-8.0 redis_flush_lottery"]
    assert set(flat) == {"valkey-8.0 snapshot_restore", "valkey-8.0 redis_flush_lottery",
                         "valkey-8.0 flush_with_backlog"}
    assert "closed from 3.0 s to 10.0 s of the sale (9.5 s (19:04:42 UTC) every node killed)" in out
    assert "closed from 0.3 s to 12.3 s of the sale (0.3 s (? UTC) Redis FLUSHALL)" in out
    assert "valkey-8.0 flush_with_backlog: 597 grants on the queue at the fault" in out
    # The short pass reports the bound without failing on it.
    assert chaos.summarize(report, short=True)[0] == []


def test_the_wall_clock_of_the_report_and_the_log_is_utc_to_the_millisecond():
    assert sale.wall_clock(86_400 + 3_723.0456) == "01:02:03.045"
