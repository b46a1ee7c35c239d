"""README, "For reviewers": a claim is a lease (10 minutes, `SHADOWPLANE_REVIEW_LEASE_SECONDS`):
nobody else holds the item meanwhile, a label after the lease was lost is a 409, and once it
has run out the item is back in the queue. Through the API, on SQLite and PostgreSQL, with
the clock of the review actions fixed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.db import session_scope
from controlplane.keys.service import create_key
from controlplane.review import actions
from tests.conftest import make_api
from tests.review.queuedata import add_items

T = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def at(monkeypatch: pytest.MonkeyPatch, moment: datetime) -> None:
    monkeypatch.setattr(actions, "utcnow", lambda: moment)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("lease", [None, 90.0])
def test_a_claim_is_a_lease_of_the_setting_and_a_label_after_it_is_409(
    db_url: str, monkeypatch: pytest.MonkeyPatch, lease: float | None
) -> None:
    settings = {} if lease is None else {"review_lease_seconds": lease}
    seconds = 600.0 if lease is None else lease  # the README's 10 minutes by default
    for api in make_api(db_url, **settings):
        with session_scope(api.engine) as session:
            _, other = create_key(session, name="second-reviewer", scopes=["review"], actor="t")
        first = api.headers("review")
        second = {"Authorization": f"Bearer {other}"}
        (item_id,) = add_items(api.engine, "ticket_classify", 1)

        at(monkeypatch, T)
        claimed = api.client.get("/v1/review/next?task=ticket_classify", headers=first)
        assert claimed.status_code == 200, claimed.text
        item = claimed.json()["item"]
        assert item["id"] == item_id
        assert item["lease_expires_at"] == iso(T + timedelta(seconds=seconds))

        # Within the lease nobody else holds it.
        at(monkeypatch, T + timedelta(seconds=seconds - 1))
        assert api.client.get("/v1/review/next", headers=second).status_code == 204

        # Past it: the first reviewer's label is refused, and the item is back in the queue.
        at(monkeypatch, T + timedelta(seconds=seconds + 1))
        late = api.client.post(
            f"/v1/review/{item_id}/label", json={"verdict": "a_correct"}, headers=first
        )
        assert late.status_code == 409, late.text
        assert "lease" in late.text
        taken = api.client.get("/v1/review/next", headers=second)
        assert taken.status_code == 200 and taken.json()["item"]["id"] == item_id
        done = api.client.post(
            f"/v1/review/{item_id}/label", json={"verdict": "a_correct"}, headers=second
        )
        assert done.status_code == 200, done.text
