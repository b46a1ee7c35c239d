"""The ingest request-time histogram's arithmetic: which bucket a time falls in, cumulative
buckets, and figures read back from hash fields (no Redis: the embedded counters)."""

from __future__ import annotations

from controlplane.metrics.counters import (
    BOUNDS,
    DURATION_KEY,
    KEY,
    Durations,
    IngestCounters,
    bucket_field,
    figures,
)


def test_a_time_falls_in_the_first_bucket_whose_bound_it_does_not_pass() -> None:
    assert bucket_field("200", 0.0) == "200:0.005"
    assert bucket_field("200", 0.005) == "200:0.005"  # `le`: equal to the bound is in it
    assert bucket_field("200", 0.0050001) == "200:0.01"
    assert bucket_field("422", 1.0) == "422:1.0"
    assert bucket_field("200", 10.0) == "200:10.0"
    assert bucket_field("200", 10.5) == "200:+Inf"


def test_buckets_are_cumulative_and_end_at_the_count() -> None:
    counts = (2, 0, 1, *([0] * (len(BOUNDS) - 3)), 4)  # 4 past every bound
    buckets = Durations(counts=counts, sum_us=0).buckets()
    assert [le for le, _ in buckets] == [*(str(b) for b in BOUNDS), "+Inf"]
    assert buckets[:4] == [("0.005", 2), ("0.01", 2), ("0.025", 3), ("0.05", 3)]
    assert buckets[-1] == ("+Inf", 2 + 1 + 4)


def test_figures_read_every_code_and_ignore_fields_of_other_buckets() -> None:
    read = figures(
        {
            (KEY, "accepted"): 7,
            (DURATION_KEY, "200:0.1"): 3,
            (DURATION_KEY, "200:sum_us"): 150_000,
            (DURATION_KEY, "200:0.075"): 9,  # a bound this version does not have
            (DURATION_KEY, "404:0.1"): 9,  # a code it does not write
        }
    )
    assert read.results == {"accepted": 7, "duplicate": 0, "rejected": 0}
    assert set(read.durations) == {"200", "422", "500", "503"}
    assert dict(read.durations["200"].buckets())["+Inf"] == 3
    assert read.durations["200"].sum_us == 150_000
    assert read.durations["422"] == Durations(counts=(0,) * (len(BOUNDS) + 1), sum_us=0)


def test_embedded_counters_add_each_request_to_its_bucket_and_the_sum() -> None:
    counters = IngestCounters(None)
    times = [0.003, 0.004, 0.2, 3.0]
    for seconds in times:
        counters.add(accepted=10, duplicate=1, rejected=0, seconds=seconds)
    counters.add(accepted=0, duplicate=0, rejected=0, seconds=0.001, code="422")
    read = counters.read()
    assert read.results == {"accepted": 40, "duplicate": 4, "rejected": 0}
    ok = dict(read.durations["200"].buckets())
    assert (ok["0.005"], ok["0.1"], ok["0.25"], ok["2.5"], ok["5.0"]) == (2, 2, 3, 3, 4)
    assert ok["+Inf"] == len(times)
    assert read.durations["200"].sum_us == round(sum(times) * 1_000_000)
    assert dict(read.durations["422"].buckets())["0.005"] == 1
